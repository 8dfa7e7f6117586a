"""What test_dataparallel_definitions's ranks run: its helpers and the two gloo ranks'
function, in a module that imports only torch and the trainers, so that each rank
``torch.multiprocessing.spawn`` starts imports that much (not the test module's polars,
SQLAlchemy, pytest and conftest: 1.3 CPU-s a rank)."""

from __future__ import annotations

import time
from pathlib import Path

import torch

from trainers import loop
from trainers.dist import DistContext
from trainers.dp_study import ThresholdStop
from trainers.frozen_backbone import FrozenBackboneTrainer
from trainers.instrument import Recorder

PEER_SLEEP = 0.2  # two ranks: a slow peer's delay, long beside anything a loaded CPU adds to the other


def _ctx(rank: int = 0, world: int = 1) -> DistContext:
    return DistContext(rank=rank, world_size=world, local_rank=rank, local_world_size=world, num_nodes=1,
                       device=torch.device("cpu"), backend="gloo" if world > 1 else "none", emulated=False,
                       host="test")


def _cfg(engine: str = "ddp", length: int = 16, **params) -> dict:
    p = dict(backbone="squeezenet1_0", hidden=16, image_size=32, engine=engine, dropout=0.0, **params)
    return {"gpus": 1, "experiment": {}, "dataset": {"name": "synthetic", "num_classes": 10, "length": length},
            "trainer": {"name": "frozen_backbone", "optimizer": "sgd", "lr": 0.01, "params": p}}


def _run(trainer, iterations: int, warmup: int = 1) -> Recorder:
    rec = Recorder(torch.device("cpu"), warmup=warmup)
    loop.train(trainer, rec, iterations)
    return rec


def _slow(obj, name: str, seconds: float) -> None:
    """Make ``obj.name(...)`` sleep ``seconds`` first (an injected, known delay)."""
    inner = getattr(obj, name)

    def slowed(*args, **kwargs):
        time.sleep(seconds)
        return inner(*args, **kwargs)

    setattr(obj, name, slowed)


def _plan(iterations: int, warmup: int = 1, batch: int = 4) -> dict:
    return {"batch_per_gpu": batch, "iterations": iterations, "warmup": warmup, "seed": 0}


def _two_ranks(rank: int, port: int, out: str) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        ctx = _ctx(rank, 2)
        # the stop rule is one decision for all: rank 0 alone below 4 and 6, the mean (5) below 6 only
        votes = []
        for threshold in (4.0, 6.0):
            stop = ThresholdStop(ctx, threshold)
            stop.add(torch.tensor(0.0 if rank == 0 else 10.0))
            votes.append(stop.epoch_ended(0))
        # DDP with the study's timings: rank 1's update is slow, so rank 0 waits at the barrier;
        # a threshold every epoch reaches: both stop at the end of epoch 0 (16 images / 2 ranks / 2)
        cfg = _cfg("ddp", study_timing=True, loss_threshold=100.0, stop_at_threshold=True)
        trainer = FrozenBackboneTrainer(ctx, cfg, _plan(11, batch=2))
        if rank == 1:
            _slow(trainer.optimizer, "step", PEER_SLEEP)
        rec = _run(trainer, 12)
        torch.save({"votes": votes, "iterations": rec.iterations_done, "study": trainer.study.seconds,
                    "extra": trainer.summary_extra(), "rows": rec.rows()}, Path(out) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()
