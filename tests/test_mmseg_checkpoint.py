"""trainer=swinv2_upernet checkpoints (experiment.checkpoint=true), on CPU.

A micro SwinV2 + UPerNet (64x64 crops, synthetic data) stopped by the preemption signal
and resumed is the same run as one never stopped: same iterations once each, the same
parameters, optimizer state and learning rates at the end (bitwise: CPU, one thread),
the LR schedule continuing across the stop, and one timed run across both attempts. A
dataset's sampler continues at the images the stopped attempt had not read. (On the local
SLURM such a point of 2 ranks signalled mid-run survives its requeue: tests/test_internode.py,
whose micro SwinV2 point across two nodes it is.)
"""

from __future__ import annotations

import os
import signal
import time

import pytest

pytest.importorskip("mmseg")
import torch  # noqa: E402

from job_specs import a_spec  # noqa: E402
from trainers import loop  # noqa: E402
from trainers.checkpoint import Checkpointer, Requeue  # noqa: E402
from trainers.dist import DistContext  # noqa: E402
from trainers.instrument import Recorder  # noqa: E402
from trainers.mmseg import compat  # noqa: E402
from trainers.mmseg.trainer import build  # noqa: E402
from trainers.registry import spec_of  # noqa: E402

try:
    from tests.datagen import write_ade20k
except ImportError:  # tests/ on sys.path as a rootdir folder rather than a package
    from datagen import write_ade20k

compat.apply()
import mmengine.runner  # noqa: E402,F401  (its imports set process-wide state: at collection, not in a test)

WARMUP, TOTAL, STOP = 1, 6, 2
# warm-up over 3 iterations then poly decay: the stop (after iteration 2) falls inside
# the linear warm-up, and the resumed attempt crosses into the poly part
PARAMS = {"variant": "micro", "drop_path_rate": 0.0, "warmup_iters": 3, "warmup_ratio": 0.1, "log_interval": 1}
PLAN = {"batch_per_gpu": 2, "seed": 5, "warmup": WARMUP, "iterations": TOTAL - WARMUP}


def job_cfg(**dataset) -> dict:
    ds = {"name": "synthetic", "root": None, "image_size": 64, "channels": 3, "num_classes": 150,
          "num_workers": 0, "fraction": None, "length": 8}
    ds.update(dataset)
    return {"trainer": {"name": "swinv2_upernet", "optimizer": "adamw", "lr": 1e-3, "weight_decay": 0.01,
                        "precision": "fp32", "params": dict(PARAMS)},
            "dataset": ds, "experiment": {"checkpoint": True}}


@pytest.fixture
def ctx():
    saved, threads = signal.getsignal(signal.SIGUSR2), torch.get_num_threads()
    torch.set_num_threads(1)  # one thread: the same sums in the same order, bitwise
    yield DistContext(rank=0, world_size=1, local_rank=0, local_world_size=1, num_nodes=1,
                      device=torch.device("cpu"), backend="none", emulated=False, host="here")
    torch.set_num_threads(threads)
    signal.signal(signal.SIGUSR2, saved)


def _attempt(ctx, folder, attempt_no, *, signal_after=None, cfg=None):
    """One attempt of the point, as trainers/job.py runs it: build, resume, train."""
    cfg = cfg or job_cfg()
    spec = a_spec(7, checkpoint_dir=str(folder), config=cfg, plan=PLAN)
    trainer, rec = build(ctx, cfg, PLAN), Recorder(ctx.device, warmup=WARMUP)
    lrs: list[float] = []  # the learning rate after each iteration (the next one's)
    ckpt = Checkpointer(ctx, spec, TOTAL, attempt_no=attempt_no)
    ckpt.install()
    resumed = ckpt.load(trainer, rec)
    hook = ckpt.hook(trainer, rec)

    def between(done):
        lrs.append(trainer.optim_wrapper.get_lr()["lr"][0])
        if done == signal_after:
            os.kill(os.getpid(), signal.SIGUSR2)  # the handler only raises the checkpointer's flag
            time.sleep(0.01)
        hook(done)

    try:
        loop.train(trainer, rec, TOTAL, between)
    finally:
        trainer.close()
    return trainer, rec, ckpt, resumed, lrs


def test_swinv2_upernet_declares_it_checkpoints():
    assert spec_of("swinv2_upernet").checkpoint


def test_a_stopped_micro_swinv2_resumes_as_the_run_never_stopped(ctx, tmp_path):
    with pytest.raises(Requeue, match=f"checkpointed at iteration {STOP} of {TOTAL} on SIGUSR2"):
        try:
            _attempt(ctx, tmp_path, 0, signal_after=STOP)
        finally:
            assert sorted(p.name for p in tmp_path.iterdir()) == [f"p7-r0-i{STOP}.pt"]
    trainer, rec, ckpt, resumed, lrs = _attempt(ctx, tmp_path, 1)
    assert resumed == STOP and trainer.loop.iter == TOTAL
    fresh, fresh_rec, _, none, fresh_lrs = _attempt(ctx, tmp_path / "fresh", 0)
    assert none is None

    # the same iterations, once each, and the same training (losses, then weights)
    rows, fresh_rows = rec.rows(), fresh_rec.rows()
    assert [r["iter"] for r in rows] == list(range(TOTAL)) and sum(r["warmup"] for r in rows) == WARMUP
    assert [r["loss"] for r in rows] == [r["loss"] for r in fresh_rows]
    for (name, a), b in zip(trainer.module.state_dict().items(), fresh.module.state_dict().values()):
        assert torch.equal(a, b), name
    # AdamW's moments and step counts, and the learning rates of every group
    mine, theirs = trainer.optim_wrapper.state_dict(), fresh.optim_wrapper.state_dict()
    assert [g["lr"] for g in mine["param_groups"]] == [g["lr"] for g in theirs["param_groups"]]
    assert mine["state"].keys() == theirs["state"].keys()
    for key, state in mine["state"].items():
        for field, value in state.items():
            assert torch.equal(value, theirs["state"][key][field]), (key, field)
    assert int(mine["state"][0]["step"]) == TOTAL
    # the LR schedule continued: the resumed attempt's rates are the uninterrupted run's,
    # rising in the warm-up before the stop, falling in the poly decay after it
    assert lrs == fresh_lrs[STOP:]
    assert fresh_lrs[0] < fresh_lrs[1] and lrs[0] > lrs[1] > lrs[2]
    sched = [(s.last_step, s.get_last_value()) for s in trainer.runner.param_schedulers]
    assert sched == [(s.last_step, s.get_last_value()) for s in fresh.runner.param_schedulers]
    assert trainer.optim_wrapper._inner_count == fresh.optim_wrapper._inner_count == TOTAL

    # one timed run across both attempts, the gap between them apart
    summary = rec.summary(rows)
    assert summary["iterations"] == TOTAL - WARMUP and summary["images"] == 2 * (TOTAL - WARMUP)
    info = ckpt.summary(rec)
    first, second = info["segments"]
    assert (first["attempt"], first["first_iter"], first["end_iter"]) == (0, 0, STOP)
    assert (second["attempt"], second["first_iter"], second["end_iter"]) == (1, STOP, TOTAL)
    assert info["resumed"] == 1 and second["gap_before_s"] >= 0
    assert summary["wall_s"] == pytest.approx(first["wall_s"] + second["wall_s"], rel=1e-9)
    ckpt.remove()
    assert list(tmp_path.glob("*.pt")) == []


def _img_paths(batch) -> list[str]:
    return [os.path.basename(s.img_path) for s in batch["data_samples"]]


def test_a_resumed_dataset_run_reads_the_images_an_unstopped_one_reads_next(ctx, tmp_path):
    write_ade20k(tmp_path, n_train=5, n_val=1, size=(64, 48))
    cfg = job_cfg(name="ade20k", root=str(tmp_path), image_size=64, length=None)
    whole = build(ctx, cfg, PLAN)
    order = [_img_paths(next(whole.loop.dataloader_iterator)) for _ in range(5)]
    whole.close()
    assert len({p for batch in order for p in batch}) == 5  # the 5 images, shuffled, across epochs
    resumed = build(ctx, cfg, PLAN)
    resumed.resume_at(3)
    assert resumed.loop.iter == 3
    assert [_img_paths(next(resumed.loop.dataloader_iterator)) for _ in range(2)] == order[3:]
    resumed.close()
