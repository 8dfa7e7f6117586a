"""Data parallelism taken apart so that each stage can be timed.

- ``HandDataParallel``: the hand-built ("vanilla") single-process module: replicate
  (copy the trainable weights to every device) -> scatter (split the batch) ->
  parallel_apply (one thread per device) -> gather (outputs onto the first device),
  and after backward ``reduce_gradients`` (sum the replicas' gradients onto the first
  device), an explicit synchronisation step. Its primitives are plain tensor copies,
  so the same code runs over CUDA devices or, in tests, over ``["cpu", "cpu"]``.
- ``dp_forward``: ``nn.DataParallel.forward`` stage by stage, calling DataParallel's own
  ``scatter``/``replicate``/``parallel_apply``/``gather``.
- ``StageClock`` and ``breakdown_row``: per-iteration stage times -> ``breakdown`` rows.
"""

from __future__ import annotations

import copy
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Sequence

import torch
from torch import nn

from trainers.flops import counting
from trainers.stats import percentile

Lap = Callable[[str, str], None]  # lap(phase, stage): the Recorder phase and the stage that just ended


def breakdown_row(phase: str, values: Sequence[float]) -> dict:
    """One ``breakdown`` row of per-iteration seconds."""
    vals = list(values)
    return {"phase": phase, "total_s": sum(vals), "mean_s": statistics.fmean(vals) if vals else None,
            "median_s": statistics.median(vals) if vals else None,
            "p95_s": percentile(vals, 95) if vals else None, "count": len(vals)}


class StageClock:
    """Stamps at stage ends, per iteration: ``perf_counter`` on CPU, CUDA events (on the
    current stream, resolved only in ``seconds``) on CUDA, as the Recorder does."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self._iters: list[list[tuple[str, Any]]] = []

    def _stamp(self) -> Any:
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev
        return time.perf_counter()

    def start(self) -> None:
        self._iters.append([("", self._stamp())])

    def lap(self, stage: str) -> None:
        self._iters[-1].append((stage, self._stamp()))

    def seconds(self, first: int, last: int) -> dict[str, list[float]]:
        """stage -> seconds per iteration (summed within one) of iterations ``first..last-1``."""
        if self.cuda:
            torch.cuda.synchronize()
        out: dict[str, list[float]] = {}
        for marks in self._iters[first:last]:
            per: dict[str, float] = {}
            for (_, a), (stage, b) in zip(marks, marks[1:]):
                per[stage] = per.get(stage, 0.0) + (a.elapsed_time(b) / 1000.0 if self.cuda else b - a)
            for stage, s in per.items():
                out.setdefault(stage, []).append(s)
        return out


def join_devices(devices: Sequence[torch.device]) -> None:
    """Make the first device's current stream wait for the others' (no host sync), so a
    stamp taken next on the first device follows every device's work."""
    if len(devices) < 2 or devices[0].type != "cuda":
        return
    here = torch.cuda.current_stream(devices[0])
    for d in devices[1:]:
        ev = torch.cuda.Event()
        ev.record(torch.cuda.current_stream(d))
        here.wait_event(ev)


class HandDataParallel(nn.Module):
    """Single-process data parallelism built by hand (see the module docstring).

    ``module`` must already sit on ``devices[0]``. Replicas on the other devices are
    deep copies made once: frozen parameters and buffers never change, so only the
    trainable parameters are copied again at every ``replicate()``. With fewer than two
    devices the module runs as it is (as nn.DataParallel does on CPU). Parameters and
    ``state_dict`` are the master's only; the replicas are not submodules.
    """

    def __init__(self, module: nn.Module, devices: Sequence[torch.device | str] = ()):
        super().__init__()
        self.module = module
        self.devices = [torch.device(d) for d in devices]
        replicas = [module] + [copy.deepcopy(module).to(d) for d in self.devices[1:]]
        object.__setattr__(self, "_replicas", replicas)  # not registered: no duplicate parameters
        names = [n for n, p in module.named_parameters() if p.requires_grad]
        self._trainable = [[dict(r.named_parameters())[n] for n in names] for r in replicas]
        self._pool = ThreadPoolExecutor(len(replicas), thread_name_prefix="replica") if len(replicas) > 1 else None
        self._used = len(replicas)

    @property
    def replicas(self) -> list[nn.Module]:
        return list(self._replicas)

    def train(self, mode: bool = True) -> "HandDataParallel":
        super().train(mode)
        for r in self._replicas[1:]:
            r.train(mode)
        return self

    # ------------------------------------------------------------ the stages
    def replicate(self) -> None:
        """Copy the master's trainable weights into every other replica."""
        with torch.no_grad():
            for params in self._trainable[1:]:
                for master, copy_ in zip(self._trainable[0], params):
                    copy_.copy_(master, non_blocking=True)

    def scatter(self, x: torch.Tensor) -> list[torch.Tensor]:
        """Split the batch into (at most) one chunk per device, as nn.DataParallel does."""
        if len(self._replicas) < 2:
            return [x]
        chunks = x.chunk(len(self._replicas))
        self._used = len(chunks)
        return [c.to(d, non_blocking=True) for c, d in zip(chunks, self.devices)]

    def parallel_apply(self, chunks: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """Run each replica on its chunk, one thread per device (grad and autocast modes carried over)."""
        if len(chunks) == 1:
            return [self._replicas[0](chunks[0])]
        grad = torch.is_grad_enabled()
        autocast = torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda")

        def run(i: int) -> torch.Tensor:
            device = self.devices[i]
            with torch.set_grad_enabled(grad):
                if device.type == "cuda":
                    with torch.cuda.device(device), torch.autocast("cuda", enabled=autocast[0], dtype=autocast[1]):
                        return self._replicas[i](chunks[i])
                return self._replicas[i](chunks[i])

        if counting():  # FLOPs counted in this thread only: the replicas one after another
            return [run(i) for i in range(len(chunks))]
        return [f.result() for f in [self._pool.submit(run, i) for i in range(len(chunks))]]

    def gather(self, outputs: Sequence[torch.Tensor]) -> torch.Tensor:
        """Concatenate the outputs on the first device (autograd sends the gradients back)."""
        if len(outputs) == 1:
            return outputs[0]
        return torch.cat([o.to(self.devices[0], non_blocking=True) for o in outputs])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.replicate()
        return self.gather(self.parallel_apply(self.scatter(x)))

    def timed_forward(self, x: torch.Tensor, lap: Lap) -> torch.Tensor:
        """``forward`` with ``lap`` at every stage end (comm for copies, forward for compute)."""
        self.replicate()
        lap("comm", "replicate")
        chunks = self.scatter(x)
        lap("comm", "scatter")
        outputs = self.parallel_apply(chunks)
        join_devices(self.devices[: len(outputs)])
        lap("forward", "parallel_apply")
        out = self.gather(outputs)
        lap("comm", "gather")
        return out

    def reduce_gradients(self) -> None:
        """Sum the replicas' gradients into the master's on the first device (one coalesced
        copy per replica) and clear the replicas' gradients."""
        master = self._trainable[0]
        if not master or self._used < 2:
            return
        total = None
        for params in self._trainable[1: self._used]:
            flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params])
            flat = flat.to(self.devices[0], non_blocking=True)
            total = flat if total is None else total + flat
            for p in params:
                p.grad = None
        offset = 0
        for p in master:
            part = total[offset: offset + p.numel()].view_as(p)
            offset += p.numel()
            if p.grad is None:
                p.grad = part.clone()
            else:
                p.grad.add_(part)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)


def dp_forward(dp: nn.DataParallel, x: torch.Tensor, lap: Lap) -> torch.Tensor:
    """``nn.DataParallel.forward(x)`` through DataParallel's own stage methods, with ``lap``
    at every stage end. Without devices (CPU) DataParallel runs its module, and so does this."""
    if not dp.device_ids:
        lap("comm", "scatter")
        out = dp.module(x)
        lap("forward", "parallel_apply")
        lap("comm", "gather")
        return out
    inputs, kwargs = dp.scatter((x,), {}, dp.device_ids)
    lap("comm", "scatter")
    if len(dp.device_ids) == 1:
        out = dp.module(*inputs[0], **kwargs[0])
        lap("forward", "parallel_apply")
        lap("comm", "gather")
        return out
    replicas = dp.replicate(dp.module, dp.device_ids[: len(inputs)])
    lap("comm", "replicate")
    if counting():  # FLOPs counted in this thread only (trainers.flops.counting)
        outputs = []
        for replica, inp, kw, index in zip(replicas, inputs, kwargs, dp.device_ids):
            with torch.cuda.device(index):
                outputs.append(replica(*inp, **kw))
    else:
        outputs = dp.parallel_apply(replicas, inputs, kwargs)
    join_devices([torch.device("cuda", i) for i in dp.device_ids[: len(inputs)]])
    lap("forward", "parallel_apply")
    out = dp.gather(outputs, dp.output_device)
    lap("comm", "gather")
    return out
