"""The ViT study: model sizes, dataset share, epochs, gradient accumulation under
no_sync, DeepSpeed's timers, and DDP/DeepSpeed end to end through campaign."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import socket
import sqlite3

import pytest

from campaign.catalogue.config import ExperimentSpec
from campaign.common.errors import ConfigError
from campaign.launch import validate
from campaign.launch.validate import check_engine

try:
    from tests.datagen import write_cifar10
    from tests.test_frozen_backbone import launch, wait_and_read
except ImportError:  # tests/ on sys.path as a rootdir folder rather than a package
    from datagen import write_cifar10
    from test_frozen_backbone import launch, wait_and_read

torch = pytest.importorskip("torch")
pytest.importorskip("timm")
from torch import nn  # noqa: E402

from trainers.dist import DistContext  # noqa: E402
from trainers.instrument import Recorder  # noqa: E402
from trainers.vit import TINY, ViTTrainer, build_vit, dataset_fraction  # noqa: E402

HAS_DEEPSPEED = importlib.util.find_spec("deepspeed") is not None
HAS_SHARE_FIELD = "dataset_fraction_per_gpu" in {f.name for f in dataclasses.fields(ExperimentSpec)}
TINY_ARGS = ["trainer=vit", "trainer.params.model=vit_tiny"]


def vit_params(*, img: int, patch: int, dim: int, depth: int, mlp_ratio: float, classes: int) -> int:
    """Parameters of a timm VisionTransformer, from its architecture."""
    hidden = int(dim * mlp_ratio)
    tokens = (img // patch) ** 2 + 1  # patches + class token
    embed = 3 * patch * patch * dim + dim + dim + tokens * dim  # patch conv, class token, positions
    block = 2 * dim + (dim * 3 * dim + 3 * dim) + (dim * dim + dim) + 2 * dim + (dim * hidden + hidden) + (hidden * dim + dim)
    return embed + depth * block + 2 * dim + dim * classes + classes


@pytest.mark.parametrize("classes", [1000, 10, 100])
def test_vit_b16_size(classes):
    with torch.device("meta"):
        model = build_vit("vit_base_patch16_224", num_classes=classes)
    count = sum(p.numel() for p in model.parameters())
    assert count == vit_params(img=224, patch=16, dim=768, depth=12, mlp_ratio=4.0, classes=classes)
    if classes == 1000:
        assert count == 86_567_656  # ViT-B/16 as published


def test_tiny_vit_size():
    model = build_vit("vit_tiny", num_classes=10)
    assert sum(p.numel() for p in model.parameters()) == vit_params(
        img=32, patch=TINY["patch_size"], dim=TINY["embed_dim"], depth=TINY["depth"], mlp_ratio=TINY["mlp_ratio"], classes=10)


def test_local_weights_head_skipped_when_classes_differ(tmp_path):
    torch.manual_seed(0)
    source = build_vit("vit_tiny", num_classes=100)
    torch.save({"model": source.state_dict()}, tmp_path / "vit.pth")
    model = build_vit("vit_tiny", num_classes=10, weights=str(tmp_path / "vit.pth"))
    assert torch.equal(model.patch_embed.proj.weight, source.patch_embed.proj.weight)
    assert model.head.out_features == 10
    torch.save(nn.Linear(2, 2).state_dict(), tmp_path / "other.pth")
    with pytest.raises(ValueError, match="not vit_tiny weights"):
        build_vit("vit_tiny", num_classes=10, weights=str(tmp_path / "other.pth"))


def test_dataset_share_grows_with_gpus():
    cfg = {"experiment": {"dataset_fraction_per_gpu": 0.1}, "dataset": {"fraction": 0.5}}
    assert [dataset_fraction(cfg, n) for n in (1, 2, 4, 16)] == [0.1, 0.2, 0.4, 1.0]
    assert dataset_fraction({"experiment": {}, "dataset": {"fraction": 0.5}}, 4) == 0.5


# ---------------------------------------------------------------------------- the trainer in-process


def _ctx(distributed: bool = False) -> DistContext:
    return DistContext(rank=0, world_size=1, local_rank=0, local_world_size=1, num_nodes=1, device=torch.device("cpu"),
                       backend="gloo" if distributed else "none", emulated=False, host="test")


def _cfg(engine: str = "ddp", **dataset) -> dict:
    return {"gpus": 1, "experiment": {},
            "dataset": dict({"name": "synthetic", "num_classes": 10, "length": 16}, **dataset),
            "trainer": {"name": "vit", "optimizer": "sgd", "lr": 0.01, "precision": "fp32",
                        "params": {"model": "vit_tiny", "engine": engine}}}


def _run(trainer, rec: Recorder, n: int) -> None:
    for _ in range(n):
        rec.begin()
        loss = trainer.step(rec)
        rec.end(loss, trainer.images_per_step)
    rec.finish()


@pytest.fixture
def one_rank_group():
    """A real 1-rank gloo process group, so the trainer wraps its model in DDP."""
    import torch.distributed as dist

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_epochs_reported_apart_with_accuracy():
    plan = {"batch_per_gpu": 4, "iterations": 8, "warmup": 2, "seed": 0, "grad_accum": 1}
    trainer = ViTTrainer(_ctx(), _cfg(), plan)  # 16 images, batches of 4: 4 iterations per epoch
    rec = Recorder(torch.device("cpu"), warmup=2)
    _run(trainer, rec, 10)
    rows = {r["phase"]: r for r in trainer.breakdown_rows()}
    assert [rows[f"epoch_{e}"]["count"] for e in range(3)] == [4, 4, 2]
    epochs = trainer.summary_extra()["epochs"]
    assert [e["iterations"] for e in epochs] == [4, 4, 2]
    assert all(0.0 <= e["train_accuracy"] <= 1.0 for e in epochs)
    assert trainer.summary_extra()["dataset_size"] == 16


def test_grad_accum_all_reduces_once_per_step(one_rank_group):
    plan = {"batch_per_gpu": 2, "iterations": 2, "warmup": 0, "seed": 0, "grad_accum": 3}
    trainer = ViTTrainer(_ctx(distributed=True), _cfg(), plan)
    assert isinstance(trainer.model, nn.parallel.DistributedDataParallel)
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    calls = []

    def counting(state, bucket):
        calls.append(bucket.index())
        return allreduce_hook(state, bucket)

    trainer.model.register_comm_hook(None, counting)
    rec = Recorder(torch.device("cpu"), warmup=0)
    _run(trainer, rec, 2)
    assert trainer.images_per_step == 6
    buckets = len(set(calls))
    assert len(calls) == 2 * buckets  # once per optimizer step, not per micro-batch: no_sync on the others
    assert all(r["comm_s"] is not None for r in rec.rows())


@pytest.mark.slow  # importing and starting DeepSpeed takes its time
@pytest.mark.skipif(not HAS_DEEPSPEED, reason="DeepSpeed is not installed")
def test_deepspeed_timers_become_breakdown_rows():
    plan = {"batch_per_gpu": 2, "iterations": 2, "warmup": 1, "seed": 0, "grad_accum": 2}
    saved = dict(os.environ)  # DeepSpeed's RANK/LOCAL_RANK/WORLD_SIZE must not reach later jobs
    trainer = ViTTrainer(_ctx(), _cfg("deepspeed"), plan)
    try:
        rec = Recorder(torch.device("cpu"), warmup=1)
        _run(trainer, rec, 3)
        rows = {r["phase"]: r for r in trainer.breakdown_rows()}
        for timer in ("fwd", "bwd", "bwd_inner", "bwd_allreduce", "step"):
            assert rows[f"deepspeed.{timer}"]["count"] == 2  # the timed iterations only
        assert rows["deepspeed.fwd"]["total_s"] > 0
        assert trainer.summary_extra()["zero_stage"] == 0
        # one rank: DeepSpeed's bwd_allreduce is its gradient bookkeeping, not communication
        assert trainer.summary_extra()["comm_source"] is None and not rec.allreduce_rows()
        assert all(r["forward_s"] and r["comm_s"] is None for r in rec.rows())
        # the breakdown a job stores (trainers/job.py): nothing called communication, and its
        # window (data, forward, backward, step) tiles the iteration, only the end() call outside
        from trainers.job import _breakdown

        ph = {r["phase"]: r["total_s"] for r in _breakdown(rec, rec.rows(), trainer)}
        assert not {"comm", "comm_exposed", "backward_compute", "comm_marked"} & set(ph)
        assert ph["deepspeed.bwd_allreduce"] > 0
        window = ph["data"] + ph["forward"] + ph["backward"] + ph["step"]
        # outside it: the end() call, and whatever preempts this process between two marks: 0.99
        # of the iteration on a quiet machine, 0.88 once in a whole run's load (two timed iterations)
        assert 0.75 * ph["iteration"] <= window <= ph["iteration"] * 1.0001
    finally:
        trainer.close()
        os.environ.clear()
        os.environ.update(saved)


def test_deepspeed_refused_at_launch_when_missing(monkeypatch):
    monkeypatch.setattr(validate.importlib.util, "find_spec", lambda name: None)
    config = {"trainer": {"name": "vit", "params": {"engine": "deepspeed"}}, "gpus": 1, "nodes": 1,
              "platform": {"name": "local", "device": "cpu"}, "container": {"runtime": "none"}}
    with pytest.raises(ConfigError) as err:
        check_engine(config)
    assert str(err.value) == ("engine=deepspeed needs DeepSpeed, which is not installed; "
                              "install it with: pip install -c constraints.txt 'campaign[deepspeed]'")
    config["container"] = {"runtime": "apptainer"}  # the image decides, not this Python
    check_engine(config)


# ---------------------------------------------------------------------------- through campaign


def _ranks(tmp_path, ranks: set[tuple[int, int]], *overrides: str) -> set[str]:
    """Launch with ``overrides``, check the iterations are those of ``ranks`` ((gpus, rank)
    pairs), each with forward and comm times (DDP's at one rank too: its all-reduce hook
    runs), and return the breakdown phases the jobs stored."""
    res = launch(tmp_path, *TINY_ARGS, *overrides)
    assert res.returncode == 0, res.stderr
    rows = wait_and_read(tmp_path)
    assert {(r["gpus"], r["rank"]) for r in rows} == ranks
    assert all(r["forward_s"] is not None and r["comm_s"] is not None for r in rows)
    with sqlite3.connect(tmp_path / "res" / "campaign.db") as db:
        return {r[0] for r in db.execute("SELECT phase FROM breakdown")}


@pytest.mark.slow
@pytest.mark.skipif(not HAS_SHARE_FIELD, reason="ExperimentSpec.dataset_fraction_per_gpu is not wired yet")
def test_ddp_weak_scaling_by_dataset_share_on_cifar10_with_grad_accum(tmp_path):
    """DDP at one and two ranks on CIFAR-10 files, each GPU bringing a quarter of the 40
    training images, micro-batches of 2 accumulated in pairs: epochs reported apart."""
    write_cifar10(tmp_path / "data", n_per_batch=8)  # 40 training images
    phases = _ranks(tmp_path, {(1, 0), (2, 0), (2, 1)}, "gpus=1,2", "dataset=cifar10",
                    f"dataset.root={tmp_path / 'data'}", "experiment=weak_scaling_dataset",
                    "experiment.dataset_fraction_per_gpu=0.25", "experiment.images_per_gpu=2",
                    "experiment.grad_accum=2", "experiment.base_iterations=6", "experiment.warmup_iterations=1")
    assert {"epoch_0", "epoch_1"} <= phases
    with sqlite3.connect(tmp_path / "res" / "campaign.db") as db:
        extra = {r[0]: json.loads(r[1]) for r in db.execute(
            "SELECT p.gpus, t.extra FROM rank_timing t JOIN attempt a ON a.id = t.attempt_id "
            "JOIN point p ON p.id = a.point_id WHERE t.rank = 0")}
    assert {g: e["dataset_size"] for g, e in extra.items()} == {1: 10, 2: 20}  # 25 % of 40 per GPU


@pytest.mark.slow
@pytest.mark.skipif(not HAS_DEEPSPEED, reason="DeepSpeed is not installed")
def test_deepspeed_on_synthetic_two_ranks(tmp_path):
    """Two ranks: DeepSpeed's all-reduce is the communication, exposed in backward. One rank
    (its bwd_allreduce bookkeeping, nothing called communication):
    test_deepspeed_timers_become_breakdown_rows."""
    phases = _ranks(tmp_path, {(2, 0), (2, 1)}, "gpus=2", "trainer.params.engine=deepspeed", "dataset=synthetic",
                    "dataset.length=32", "experiment.images_per_gpu=2")
    assert {"deepspeed.fwd", "deepspeed.bwd", "deepspeed.bwd_allreduce", "deepspeed.step"} <= phases
    with sqlite3.connect(tmp_path / "res" / "campaign.db") as db:
        ranks = db.execute("SELECT p.gpus, t.rank, t.attempt_id, t.trainable_params, t.comm_s, t.extra "
                           "FROM rank_timing t JOIN attempt a ON a.id = t.attempt_id "
                           "JOIN point p ON p.id = a.point_id").fetchall()
        phase_rows = db.execute("SELECT attempt_id, rank, phase, total_s FROM breakdown").fetchall()
    assert sorted((g, r) for g, r, *_ in ranks) == [(2, 0), (2, 1)]
    for gpus, rank, attempt, params, comm_s, extra in ranks:
        ph = {p: t for a, r, p, t in phase_rows if (a, r) == (attempt, rank)}
        extra = json.loads(extra)
        exposed, busy = ph.get("comm_exposed", 0.0), ph.get("comm", 0.0)
        # The window as DDP's breakdown tiles it (docs/breakdown.md): data, compute
        # (forward + backward compute + step, overlapped communication taken out), exposed
        # and overlapped communication; DeepSpeed reduces after autograd (stage 0): none hidden.
        window = ph["data"] + ph["forward"] + ph["backward"] + ph["step"]
        overlapped = busy - exposed
        compute = ph["forward"] + ph.get("backward_compute", ph["backward"]) + ph["step"] - overlapped
        shares = [x / window for x in (ph["data"], compute, exposed, overlapped)]
        assert sum(shares) == pytest.approx(1.0, abs=1e-6), (gpus, rank, ph)
        # only the end() call is outside (its share grows on a loaded machine: 4.5 % in a whole suite's run)
        assert 0.9 * ph["iteration"] <= window <= ph["iteration"] * 1.0001
        if gpus == 1:  # bookkeeping in backward, nothing called communication
            assert comm_s is None and extra["comm_source"] is None
            assert not {"comm", "comm_exposed", "backward_compute", "comm_marked"} & set(ph)
            assert "allreduce_bytes_per_iter" not in extra and ph["deepspeed.bwd_allreduce"] > 0
        else:
            assert extra["comm_source"] == "deepspeed" and comm_s == pytest.approx(busy)
            assert "comm_marked" not in ph and overlapped == pytest.approx(0.0, abs=1e-9)
            assert 0 < exposed <= ph["backward"]
            # every trainable parameter's fp32 gradient, once per optimizer step
            assert extra["allreduce_bytes_per_iter"] == 4 * params
            assert extra["allreduce_buckets_per_iter"] == 1


@pytest.mark.parametrize("overrides,message", [
    (["trainer.params.engine=horovod"], "unknown trainer.params.engine 'horovod' for trainer=vit; valid: ddp, deepspeed"),
] + ([] if HAS_DEEPSPEED else [(["trainer.params.engine=deepspeed"], "engine=deepspeed needs DeepSpeed")]))
def test_vit_refused_at_launch_with_one_line(tmp_path, overrides, message):
    res = launch(tmp_path, *TINY_ARGS, *overrides)
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0]
