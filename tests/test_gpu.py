"""The CUDA paths, on a real GPU (marker ``gpu``; skipped where torch sees none, as on the
development machine): CUDA-event phases and their compaction, no host-device
synchronisation inside the timed window, the peak memory through a reset of CUDA's
counter, the profiler window's trace, the all-reduce hook on NCCL, and campaigns on
``platform=local_gpu`` (the trainers on CUDA, MFU against the math in use, GPU
utilisation from the trace, both single-process engines).

Written to the chrome-trace format and public torch APIs only, so that they pass on
the torch a GPU machine brings (2.11 was the first) as on the pinned one.

    .venv/bin/python -m pytest -m gpu          # on a machine with a GPU
    bash scripts/gpu-check.sh                  # these, and the numbers on one screen
"""

from __future__ import annotations

import json
import socket

import pytest
import torch

from conftest import Workspace
from trainers.instrument import Recorder

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible to torch")]
GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
SMALL = ["experiment=smoke", "experiment.base_iterations=6", "experiment.warmup_iterations=2"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _iterate(rec: Recorder, n: int, device: torch.device) -> None:
    a = torch.randn(512, 512, device=device)
    losses = [torch.tensor(float(i), device=device) for i in range(n)]
    for i in range(n):
        rec.begin()
        rec.mark("data")
        b = a @ a
        rec.mark("forward")
        (b @ a).sum()
        rec.mark("backward")
        rec.mark("step")
        rec.end(losses[i], images=4)
    rec.finish()


def test_cuda_event_phases_tile_the_iteration_and_compaction_keeps_them():
    device = torch.device("cuda", 0)
    for every in (0, 2):
        rec = Recorder(device, warmup=1, resolve_every=every)
        _iterate(rec, 12, device)
        if every:
            assert rec._compacted > 0  # events turned into seconds during the run
        rows = rec.rows()
        assert [r["loss"] for r in rows] == [float(i) for i in range(12)]
        for r in rows:
            parts = sum(r[f"{p}_s"] for p in ("data", "forward", "backward", "step"))
            assert parts == pytest.approx(r["iter_s"], rel=1e-2, abs=1e-4)  # the marks tile begin..end
            assert r["forward_s"] > 0
        summary = rec.summary(rows)
        assert summary["iterations"] == 11 and summary["wall_s"] > 0


def test_no_synchronisation_inside_the_timed_window():
    """torch's sync debug mode raises on any call that makes the host wait for the GPU
    (``.item()``, a device-to-host copy...): the Recorder's iterations, compactions
    included, make none."""
    device = torch.device("cuda", 0)
    a = torch.randn(256, 256, device=device)
    rec = Recorder(device, warmup=1, resolve_every=4, expected_iterations=41)
    for i in range(41):
        rec.begin()
        if i == 1:  # the window is open (its edge synchronised): from here on, nothing may wait
            torch.cuda.set_sync_debug_mode("error")
        b = a @ a
        rec.mark("forward")
        rec.end(b.sum(), images=2)
    torch.cuda.set_sync_debug_mode("default")
    rec.finish()
    assert rec._compacted > 0 and rec._clock.created <= 41 * 8  # events reused from the pool
    assert len(rec.rows()) == 41


def test_peak_memory_survives_a_reset_of_cudas_counter():
    from trainers.memory import PeakMemory

    device = torch.device("cuda", 0)
    mib = 1 << 20
    memory = PeakMemory(device)
    rec = Recorder(device, warmup=1, memory=memory)
    memory.start()
    for i in range(5):
        rec.begin()
        size = 1024 if i == 0 else (512 if i == 2 else 16)  # warm-up 1 GiB, then 512 MiB once
        x = torch.empty(size * mib, dtype=torch.uint8, device=device)
        del x
        if i == 3:
            torch.cuda.reset_peak_memory_stats()  # as MMEngine's logger does
        rec.end(None, 1)
    rec.finish()
    assert memory.window_bytes >= 512 * mib > torch.cuda.max_memory_allocated(device)
    assert memory.warmup_bytes >= 1024 * mib and memory.resets == 1
    assert torch.cuda.reset_peak_memory_stats is torch.cuda.memory.reset_peak_memory_stats  # unwrapped again


def test_profile_window_on_the_gpu_reads_its_own_trace(tmp_path):
    from campaign_trace import read_trace
    from trainers.loop import profile_window

    device = torch.device("cuda", 0)

    class T:
        images_per_step = 4

        def __init__(self):
            self.model = torch.nn.Linear(1024, 1024).to(device)

        def step(self, rec):
            loss = self.model(torch.randn(256, 1024, device=device)).square().mean()
            rec.mark("forward")
            loss.backward()
            rec.mark("backward")
            return loss

    path = tmp_path / "0_trace.json.gz"
    row, warning = profile_window(T(), device, 4, trace_path=path)
    assert warning is None
    fig = read_trace(path)
    (dev,) = fig.devices
    assert fig.window_source == "annotation campaign:profile_window"
    assert 0 < row["gpu_util"] == dev.utilisation <= 1 and dev.kernels > 4 and row["device_s"] == dev.busy_s
    assert row["top_ops"]["kernels"] and row["top_ops"]["trace_file"] == str(path)


def test_allreduce_hook_on_nccl_times_every_bucket():
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from trainers.comm import attach

    store = dist.TCPStore("127.0.0.1", _free_port(), 1, is_master=True)
    dist.init_process_group("nccl", store=store, rank=0, world_size=1, device_id=torch.device("cuda", 0))
    try:
        device = torch.device("cuda", 0)
        model = torch.nn.Sequential(torch.nn.Linear(256, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 4096))
        ddp = DDP(model.to(device), device_ids=[0], bucket_cap_mb=16)
        trainer = type("T", (), {"model": ddp})()
        rec = Recorder(device, warmup=1)
        timer, source, _ = attach(trainer, rec)
        assert source == "allreduce_timer"
        x = torch.randn(32, 256, device=device)
        for _ in range(4):
            rec.begin()
            ddp(x).sum().backward()
            rec.mark("backward")
            rec.end()
        rec.finish()
        ar = rec.allreduce_rows()
        params = sum(p.numel() for p in model.parameters())
        assert len(ar) == 3 and all(a["bytes"] == params * 4 for a in ar)
        assert all(a["buckets"] >= 2 and a["busy_s"] > 0 and 0 <= a["exposed_s"] <= a["span_s"] + 1e-6 for a in ar)
    finally:
        dist.destroy_process_group()


def _campaign(tmp_path, *overrides: str) -> tuple[Workspace, list[tuple]]:
    ws = Workspace(tmp_path)
    res = ws.launch("-m", "platform=local_gpu", *SMALL, *overrides, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    done = ws.campaign("status", "--wait", "--interval", "1", timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = ws.query("select p.gpus, r.rank, a.provenance, r.extra from rank_timing r join attempt a "
                    "on a.id = r.attempt_id join point p on p.id = a.point_id order by p.gpus, r.rank")
    return ws, [(g, r, json.loads(p), json.loads(e)) for g, r, p, e in rows]


@pytest.mark.slow
def test_synthetic_campaign_on_this_machines_gpus(tmp_path):
    counts = "1,2" if GPUS >= 2 else "1"
    ws, rows = _campaign(tmp_path, f"gpus={counts}", "experiment.profile_iterations=3")
    assert rows
    for gpus, rank, prov, extra in rows:
        assert prov["emulated_gpus"] is False and prov["device_type"] == "cuda"
        assert prov["backend"] == ("nccl" if gpus > 1 else "none")
        assert extra["flops_source"] == "flop_counter" and extra["achieved_tflops"] > 0
        flags = extra["math_flags"]
        assert flags["device"] == "cuda" and flags["autocast"] is None  # the synthetic trainer computes in fp32
        kinds = {k for k, n in extra["flops_by_kind"].items() if n}
        assert kinds == {"conv", "matmul"}  # a conv net with a linear classifier
        if extra["peak_tflops"]:  # a model with a datasheet entry
            assert 0 < extra["mfu"] < 1
            assert extra["math"] in ("fp32", "tf32", "fp32 matmul + tf32 conv", "tf32 matmul + fp32 conv")
        assert extra["warmup_peak_memory_bytes"] > 0 and extra["peak_memory_source"] == "cuda_max_memory_allocated"
        if gpus > 1:
            assert extra["allreduce_bytes_per_iter"] > 0 and extra["comm_source"] == "allreduce_timer"
    profile = ws.query("select gpu_util, top_ops from profile")
    for util, top in profile:
        assert 0 < util <= 1  # the union of device intervals over the profiled window
        assert json.loads(top)["trace_file"].endswith("_trace.json.gz") and "warning" not in json.loads(top)
    assert ws.query("select reason from point where reason is not null") == []  # no profiler warning
    out = ws.campaign("harvest", "--table", "breakdown", "--to", "csv")
    assert out.returncode == 0 and "backward" in out.stdout


@pytest.mark.slow
def test_single_process_engines_drive_the_gpus(tmp_path):
    counts = "1,2" if GPUS >= 2 else "1"
    ws, rows = _campaign(tmp_path, f"gpus={counts}", "trainer=frozen_backbone", "trainer.params.backbone=resnet18",
                         "trainer.params.classifier=mlp", "trainer.params.hidden=64", "trainer.params.image_size=64", "dataset=synthetic",
                         "dataset.length=64", "trainer.params.engine=dataparallel,vanilla")
    assert {(g, r) for g, r, _, _ in rows} == {(int(g), 0) for g in counts.split(",")}
    for _, _, prov, _ in rows:
        assert prov["emulated_gpus"] is False and prov["world_size"] == 1
    phases = {r[0] for r in ws.query("select phase from breakdown")}
    assert {"dataparallel.parallel_apply", "vanilla.parallel_apply", "vanilla.reduce_gradients"} <= phases


@pytest.mark.slow
def test_two_processes_share_the_gpus_and_meet_in_the_studys_barrier(tmp_path):
    """trainer.params.procs_per_node=2 (the DataParallel study's launch): two processes, each
    nn.DataParallel over the machine's GPUs from cuda:0, on gloo (NCCL refuses two ranks on
    one GPU), the stop rule's collective on the host; the barrier rows of both stored."""
    counts = "1,2" if GPUS >= 2 else "1"
    ws, rows = _campaign(tmp_path, f"gpus={counts}", "trainer=frozen_backbone", "trainer.params.backbone=resnet18",
                         "trainer.params.image_size=64", "dataset=synthetic",
                         "dataset.length=16",  # 4 iterations an epoch: the 8 run end one, where the rule stops them
                         "trainer.params.engine=dataparallel", "trainer.params.procs_per_node=2",
                         "trainer.params.study_timing=true", "trainer.params.loss_threshold=100",
                         "trainer.params.stop_at_threshold=true")
    assert {(g, r) for g, r, _, _ in rows} == {(int(g), r) for g in counts.split(",") for r in (0, 1)}
    for _, _, prov, extra in rows:
        assert prov["world_size"] == 2 and prov["backend"] == "gloo" and prov["device_type"] == "cuda"
        assert extra["stopped"] == "threshold" and extra["procs_per_node"] == 2
    assert len(ws.query("select rank from breakdown where phase = 'study.comm_barrier'")) == len(rows)
