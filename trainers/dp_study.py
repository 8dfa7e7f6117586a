"""The DataParallel study's own definitions (dataparallel-frozen-backbones-a6000.txt,
section 2), kept apart from campaign's stage timings: ``StudyTiming`` times an iteration
as the study did, ``ThresholdStop`` ends a run as its convergence figures count it.

Timings (``trainer.params.study_timing=true``; breakdown rows named ``study.*``):

- training, every engine: **computation** = "resetting the gradients ..., a forward
  pass ..., computing the loss ..., the backward pass ..., updating the parameters"
  (zero_grad .. optimizer step: ``study.compute``); **communication** = "running
  ``torch.distributed.barrier()`` ... across all devices" after the update
  (``study.comm_barrier``). The device is synchronised before the barrier's clock
  starts, so the GPU's work of the five steps is computation, as the study defines it,
  not time the barrier waits for it (a host clock around asynchronous kernels would
  otherwise put the compute into the barrier); after the barrier the device is
  synchronised again (NCCL's barrier is a device collective). The study's barrier is
  across its ``torch.distributed.run`` processes: in one process (``dataparallel``,
  ``vanilla``, or DDP with one rank) there is no process group and nothing to wait
  for, so the barrier is "a barrier in a world of one": timed, ~0 (the device sync
  that ends computation is what waits for every device there). With
  ``trainer.params.procs_per_node=2`` (the study's launch: two processes a node, each
  driving the point's GPUs) the barrier waits for the other process, as the study's did.
- inference (``mode=inference``): **computation** = "time taken for each forward pass"
  (the forward call's host wall time: ``study.compute``), **communication** = "time
  taken to run ``torch.cuda.synchronize()``" right after it (``study.comm_sync``; on
  CPU there is no device to wait for: ~0).

A knob, off by default: the host synchronisation (and, with several ranks, the barrier)
every iteration removes the overlap of one iteration's host work with the previous
iteration's device work that campaign's own event-timed stages leave alone; the
study's preset turns it on.

Stop rule (``trainer.params.stop_at_threshold=true``, with ``loss_threshold``): the study
counts "the no. of epochs needed to reach a minimum threshold loss amount" / "the number
of epochs ran until the loss function fell below a certain threshold" and "record[s]
the total loss in each iteration" without saying how an epoch's loss is formed; campaign
takes the epoch's mean training loss (every rank's every iteration of the epoch,
all-reduced: one collective per epoch, so every rank takes the same decision) and ends
the run at the end of the first epoch whose mean is below the threshold; else the run
ends at its planned iterations (``experiment.epochs``: the cap).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Optional, Sequence

import torch

from trainers.dist import DistContext
from trainers.parallel import breakdown_row


def _sync(devices: Sequence[torch.device]) -> None:
    for d in devices:
        if d.type == "cuda":
            torch.cuda.synchronize(d)


class StudyTiming:
    """Per-iteration study timings (module docstring): host clocks, device-synchronised."""

    def __init__(self, ctx: DistContext, devices: Sequence[torch.device]):
        self.ctx = ctx
        self.devices = list(devices) or [ctx.device]  # every device this process drives
        self.seconds: dict[str, list[float]] = {}  # study row -> seconds per iteration
        self._t0 = 0.0

    def _add(self, name: str, seconds: float) -> None:
        self.seconds.setdefault(name, []).append(seconds)

    def start(self) -> None:
        """Computation starts (after the batch is loaded: the study's five steps exclude it)."""
        self._t0 = time.perf_counter()

    def after_update(self) -> None:
        """After the optimizer step: computation ends (device synchronised), then the barrier."""
        _sync(self.devices)
        t1 = time.perf_counter()
        if self.ctx.distributed:
            torch.distributed.barrier()
            _sync(self.devices[:1])
        t2 = time.perf_counter()
        self._add("study.compute", t1 - self._t0)
        self._add("study.comm_barrier", t2 - t1)

    def inference(self, forward: Callable[[], Any]) -> Any:
        """``forward()`` timed, then ``torch.cuda.synchronize()`` timed (the study's two figures)."""
        t0 = time.perf_counter()
        out = forward()
        t1 = time.perf_counter()
        device = out.device if isinstance(out, torch.Tensor) else self.devices[0]
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t2 = time.perf_counter()
        self._add("study.compute", t1 - t0)
        self._add("study.comm_sync", t2 - t1)
        return out

    def rows(self, first: int, last: int) -> list[dict]:
        """``breakdown`` rows of iterations ``first .. last-1`` (the timed window)."""
        return [breakdown_row(name, vals[first:last]) for name, vals in self.seconds.items() if vals[first:last]]


class ThresholdStop:
    """The stop rule (module docstring): feed every iteration's loss to ``add``; at an
    epoch's end ``epoch_ended(epoch)`` (a collective with several ranks: every rank calls
    it at the same iteration) says whether the run stops there."""

    def __init__(self, ctx: DistContext, threshold: float):
        self.ctx = ctx
        self.threshold = float(threshold)
        self._sum: Optional[torch.Tensor] = None  # on the loss's device: no host sync per iteration
        self._count = 0
        self.epoch_losses: list[float] = []  # mean training loss of every ended epoch, all ranks
        self.reached_epoch: Optional[int] = None  # the epoch (0-based) whose mean fell below

    def add(self, loss: torch.Tensor) -> None:
        v = loss.detach().reshape(()).double()
        self._sum = v if self._sum is None else self._sum + v
        self._count += 1

    def epoch_ended(self, epoch: int) -> bool:
        # NCCL reduces on the rank's GPU; gloo (CPU ranks, or processes sharing GPUs: trainers/dist.py) on the host
        device = self.ctx.device if self.ctx.backend == "nccl" else "cpu"
        total = torch.stack([self._sum.to(device) if self._sum is not None else torch.zeros((), dtype=torch.float64,
                                                                                            device=device),
                             torch.tensor(float(self._count), dtype=torch.float64, device=device)])
        if self.ctx.distributed:
            torch.distributed.all_reduce(total)
        s, n = total.tolist()
        self._sum, self._count = None, 0
        mean = s / n if n else float("nan")
        self.epoch_losses.append(mean)
        if self.reached_epoch is None and mean < self.threshold:
            self.reached_epoch = epoch
            return True
        return False

    def extra(self, iterations_done: int) -> dict[str, Any]:
        """rank_timing.extra keys: how the run ended and after how many epochs."""
        reached = self.reached_epoch is not None
        return {"stop_rule": "epoch_mean_loss_below_threshold", "stopped": "threshold" if reached else "cap",
                "epochs_to_threshold": self.reached_epoch + 1 if reached else None,
                "iterations_at_stop": iterations_done, "epoch_losses": list(self.epoch_losses)}
