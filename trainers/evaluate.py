"""Evaluation passes (``experiment.validation=true``): the test split, once per epoch.

A pass runs between two iterations, never inside one: ``trainers/loop.py`` asks the
trainer's ``Evaluator`` after every iteration whether an epoch of its loader has just
ended (``EpochBatches.ended``) and, at the end of the run, evaluates the epoch still in
progress (so a run shorter than an epoch still has its row). The pass's wall time is
taken off the timed window (``Recorder.exclude``, as a checkpoint's is) and recorded
apart, in the ``evaluation`` row's ``seconds``.

Every rank evaluates its own shard of the test split (indices ``rank, rank + world, ...``:
no sample twice, none left out, unlike a padding DistributedSampler); the sums of loss,
right answers and images are all-reduced, so the row rank 0 writes is the whole split's,
count-weighted. ``experiment.validation_images=N`` evaluates the split's first N images
instead of all of them (the same N every epoch, sharded the same way; the row's ``images``
says how many): a reduced run's accuracy at a fraction of the pass's cost. The model is
the trainer's unwrapped module (DDP's, DataParallel's, DeepSpeed's ``.module``) in eval
mode under ``no_grad``: no collective inside the pass but the one reduction, whatever the
ranks' shard sizes.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Optional

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, Subset

from trainers.dist import DistContext

SPLIT = "test"


def shard(dataset: Dataset, rank: int, world_size: int) -> Subset:
    """This rank's share of ``dataset``: every ``world_size``-th index from ``rank``."""
    return Subset(dataset, list(range(rank, len(dataset), world_size)))


class Evaluator:
    """Evaluates ``module`` on this rank's shard of the test split, reduces over ranks and
    keeps the rows (``rows``: rank 0's to write; the other ranks' stay empty).

    ``ranks``/``rank``: the processes sharing the split (1/0 for a single-process engine);
    ``prepare(x)``: the input as the model takes it (device, dtype); ``epoch_ended()``:
    the last epoch of the training loader that has ended, -1 before the first;
    ``epoch_now()``: the epoch in progress."""

    def __init__(self, ctx: DistContext, module: nn.Module, dataset: Dataset, *, batch_size: int, ranks: int,
                 rank: int, prepare: Callable[[torch.Tensor], torch.Tensor], device: torch.device,
                 epoch_ended: Callable[[], int], epoch_now: Callable[[], int], train_mode: bool = True):
        self.ctx = ctx
        self.module = module
        self.images = len(dataset)
        self.loader = DataLoader(shard(dataset, rank, ranks), batch_size=batch_size, shuffle=False)
        self.ranks = ranks
        self.prepare = prepare
        self.device = device
        self.epoch_ended = epoch_ended
        self.epoch_now = epoch_now
        self.train_mode = train_mode
        self.loss_fn = nn.CrossEntropyLoss(reduction="sum")
        self.done: set[int] = set()
        self.rows: list[dict[str, Any]] = []

    def after_iteration(self) -> float:
        """Evaluate the epoch that has just ended, if one has and it has no row yet;
        returns the pass's seconds (0.0 when none ran)."""
        ended = self.epoch_ended()
        if ended < 0 or ended in self.done:
            return 0.0
        return self.evaluate(ended)

    def at_end(self) -> float:
        """At the end of the run: evaluate the epoch in progress unless it has its row."""
        now = self.epoch_ended()
        epoch = max(now, self.epoch_now())
        return 0.0 if epoch in self.done else self.evaluate(epoch)

    def evaluate(self, epoch: int) -> float:
        """One pass over this rank's shard, reduced over ranks; returns its seconds."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)  # the training iterations' work is not the pass's
        t0 = time.perf_counter()
        was = self.module.training
        self.module.eval()
        sums = torch.zeros(3, dtype=torch.float64, device=self.device)  # loss, right answers, images
        with torch.no_grad():
            for x, y in self.loader:
                x, y = self.prepare(x), y.to(self.device)
                out = self.module(x).float()
                sums[0] += self.loss_fn(out, y).double()
                sums[1] += (out.argmax(1) == y).sum().double()
                sums[2] += len(y)
        self.module.train(was)
        seconds = torch.tensor([time.perf_counter() - t0], dtype=torch.float64, device=self.device)
        if self.ranks > 1 and self.ctx.distributed:
            import torch.distributed as dist

            dist.all_reduce(sums)
            dist.all_reduce(seconds, op=dist.ReduceOp.MAX)  # the pass lasts as long as its slowest rank
        loss, right, images = (float(v) for v in sums.cpu())
        self.done.add(epoch)
        if self.ctx.rank == 0:
            self.rows.append({"epoch": int(epoch), "split": SPLIT, "images": int(images),
                              "loss": loss / images if images else None,
                              "accuracy": right / images if images else None, "seconds": float(seconds[0])})
        return time.perf_counter() - t0


def evaluator_of(trainer: Any) -> Optional[Evaluator]:
    """The trainer's Evaluator (None: validation off, or a trainer that has none)."""
    return getattr(trainer, "evaluator", None)


def build_evaluator(ctx: DistContext, cfg: dict, *, module: nn.Module, batches: Any, image_size: int,
                    batch_size: int, ranks: int, rank: int, device: torch.device, seed: int,
                    dtype: Optional[torch.dtype] = None) -> Optional[Evaluator]:
    """The trainer's Evaluator when ``experiment.validation`` is on (None otherwise): the
    test split of the point's dataset (``train=False``, whole: no ``dataset.fraction``) at
    the model's input size, ``batches`` the trainer's ``EpochBatches`` (its epochs); its first
    ``experiment.validation_images`` images only where that is set."""
    if not (cfg.get("experiment") or {}).get("validation"):
        return None
    from trainers.data import build_dataset

    test = build_dataset(cfg["dataset"], train=False, image_size=image_size, channels=3, seed=seed)
    limit = cfg["experiment"].get("validation_images")
    if limit is not None and int(limit) < len(test):
        test = Subset(test, range(int(limit)))

    def prepare(x: torch.Tensor) -> torch.Tensor:
        x = x.to(device, non_blocking=True)
        return x.to(dtype) if dtype is not None else x

    return Evaluator(ctx, module, test, batch_size=batch_size, ranks=ranks, rank=rank, prepare=prepare,
                     device=device, epoch_ended=lambda: batches.ended, epoch_now=lambda: batches.epoch)


def epoch_rows(rows: list[dict], epoch_of: list[int]) -> list[dict]:
    """``epoch_<i>`` breakdown rows: the seconds of every iteration of the Recorder's
    ``rows`` (warm-up included, in epoch 0) grouped by ``epoch_of[iter]``, the epoch the
    iteration's (last) batch came from."""
    from trainers.parallel import breakdown_row

    by: dict[int, list[float]] = {}
    for r in rows:
        if r["iter"] < len(epoch_of):
            by.setdefault(epoch_of[r["iter"]], []).append(r["iter_s"])
    return [breakdown_row(f"epoch_{e}", by[e]) for e in sorted(by)]
