"""The CUDA paths, on a real GPU (marker ``gpu``; skipped where torch sees none, as on the
development machine): CUDA-event phases and their compaction, the all-reduce hook on NCCL,
and campaigns on ``platform=local_gpu`` (the trainers on CUDA, MFU against the model's
datasheet, profiler GPU time, both single-process engines).

    .venv/bin/python -m pytest -m gpu          # on a machine with a GPU
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
        timer, source = attach(trainer, rec)
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
        if extra["peak_tflops"]:  # a model with a datasheet entry
            assert 0 < extra["mfu"] < 1
        if gpus > 1:
            assert extra["allreduce_bytes_per_iter"] > 0 and extra["comm_source"] == "allreduce_timer"
    util = ws.query("select min(gpu_util) from profile")[0][0]
    assert util is not None and 0 < util <= 1.05  # GPU time / wall time of the profiled window
    out = ws.campaign("harvest", "--table", "breakdown", "--to", "csv")
    assert out.returncode == 0 and "backward" in out.stdout


@pytest.mark.slow
def test_single_process_engines_drive_the_gpus(tmp_path):
    counts = "1,2" if GPUS >= 2 else "1"
    ws, rows = _campaign(tmp_path, f"gpus={counts}", "trainer=frozen_backbone", "trainer.params.backbone=resnet18",
                         "trainer.params.hidden=64", "trainer.params.image_size=64", "dataset=synthetic",
                         "dataset.length=64", "trainer.params.engine=dataparallel,vanilla")
    assert {(g, r) for g, r, _, _ in rows} == {(int(g), 0) for g in counts.split(",")}
    for _, _, prov, _ in rows:
        assert prov["emulated_gpus"] is False and prov["world_size"] == 1
    phases = {r[0] for r in ws.query("select phase from breakdown")}
    assert {"dataparallel.parallel_apply", "vanilla.parallel_apply", "vanilla.reduce_gradients"} <= phases
