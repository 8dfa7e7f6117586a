"""Per-iteration timing of one rank: the timed window, warm-up apart, and phases.

A trainer's loop calls ``begin()`` at the start of each iteration, ``mark(phase)``
when a phase ends (``data``, ``forward``, ``backward``, ``step``, ``comm``), and
``end(loss, images)`` at its end; ``finish()`` closes the timed window.

On CPU every mark is a ``perf_counter`` reading. On CUDA marks are CUDA events
(no per-iteration synchronize); they are resolved once, in ``finish()``. The timed
window runs from the start of the first iteration after warm-up to the end of the
last, device-synchronised at both ends.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Optional

import torch

PHASES = ("data", "forward", "backward", "step", "comm")


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100) of a non-empty list."""
    xs = sorted(values)
    if len(xs) == 1:
        return xs[0]
    pos = (len(xs) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


class Recorder:
    """Timing of one rank's iterations (see module docstring)."""

    def __init__(self, device: torch.device, warmup: int):
        self.device = device
        self.warmup = warmup
        self.cuda = device.type == "cuda"
        self._it = -1
        self._marks: list[list[tuple[str, Any]]] = []  # per iteration: [(label, stamp)]
        self._loss: list[Optional[torch.Tensor | float]] = []
        self._images: list[int] = []
        self._extra_comm: list[float] = []  # comm seconds added by hooks (CPU clocks)
        self.t_window0: Optional[float] = None
        self.t_window1: Optional[float] = None
        self.t_first: Optional[float] = None

    def _stamp(self) -> Any:
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev
        return time.perf_counter()

    # ---------------------------------------------------------------- loop API
    def begin(self) -> None:
        self._it += 1
        if self._it == 0:
            self.t_first = time.perf_counter()
        if self._it == self.warmup:
            if self.cuda:
                torch.cuda.synchronize(self.device)
            self.t_window0 = time.perf_counter()
        self._marks.append([("begin", self._stamp())])
        self._loss.append(None)
        self._images.append(0)
        self._extra_comm.append(0.0)

    def mark(self, phase: str) -> None:
        self._marks[self._it].append((phase, self._stamp()))

    def add_comm(self, seconds: float) -> None:
        """Communication time measured elsewhere (e.g. a DDP comm hook) for this iteration."""
        if self._it >= 0:
            self._extra_comm[self._it] += seconds

    def end(self, loss: Optional[torch.Tensor | float] = None, images: int = 0) -> None:
        self._marks[self._it].append(("end", self._stamp()))
        if isinstance(loss, torch.Tensor):
            loss = loss.detach()
        self._loss[self._it] = loss
        self._images[self._it] = images

    def finish(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)
        self.t_window1 = time.perf_counter()
        if self.t_window0 is None:  # no timed iteration (all warm-up)
            self.t_window0 = self.t_window1

    @property
    def iterations_done(self) -> int:
        return self._it + 1

    # ---------------------------------------------------------------- results
    def _elapsed(self, a: Any, b: Any) -> float:
        if self.cuda:
            return a.elapsed_time(b) / 1000.0
        return b - a

    def rows(self) -> list[dict]:
        """One dict per iteration: iter, warmup, iter_s, loss and phase seconds."""
        out = []
        for i, marks in enumerate(self._marks):
            if marks[-1][0] != "end":
                continue  # an interrupted iteration
            row: dict[str, Any] = {"iter": i, "warmup": i < self.warmup}
            row["iter_s"] = self._elapsed(marks[0][1], marks[-1][1])
            phases = {p: 0.0 for p in PHASES}
            seen = set()
            for (_, a), (label, b) in zip(marks, marks[1:]):
                if label in phases:
                    phases[label] += self._elapsed(a, b)
                    seen.add(label)
            if self._extra_comm[i]:
                phases["comm"] += self._extra_comm[i]
                seen.add("comm")
            for p in PHASES:
                row[f"{p}_s" if p != "data" else "data_s"] = phases[p] if p in seen else None
            loss = self._loss[i]
            row["loss"] = float(loss) if loss is not None else None
            out.append(row)
        return out

    def summary(self, rows: Optional[list[dict]] = None) -> dict:
        """The rank's timed-window summary (rank_timing columns)."""
        rows = self.rows() if rows is None else rows
        timed = [r for r in rows if not r["warmup"]]
        warm = [r for r in rows if r["warmup"]]
        iters = [r["iter_s"] for r in timed]
        images = sum(self._images[r["iter"]] for r in timed)
        wall = (self.t_window1 or 0.0) - (self.t_window0 or 0.0) if timed else 0.0

        def total(col: str) -> Optional[float]:
            vals = [r[col] for r in timed if r[col] is not None]
            return sum(vals) if vals else None

        compute_parts = [total(c) for c in ("forward_s", "backward_s", "step_s")]
        compute = sum(v for v in compute_parts if v is not None) if any(v is not None for v in compute_parts) else None
        losses = [r["loss"] for r in rows if r["loss"] is not None]
        return {
            "warmup_iterations": len(warm),
            "warmup_s": sum(r["iter_s"] for r in warm) if warm else 0.0,
            "iterations": len(timed),
            "wall_s": wall,
            "iter_mean_s": statistics.fmean(iters) if iters else None,
            "iter_median_s": statistics.median(iters) if iters else None,
            "iter_p95_s": percentile(iters, 95) if iters else None,
            "images": images,
            "images_per_s": images / wall if wall > 0 else None,
            "final_loss": losses[-1] if losses else None,
            "data_wait_s": total("data_s"),
            "compute_s": compute,
            "comm_s": total("comm_s"),
        }
