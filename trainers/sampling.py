"""A sampled run whose window the data chooses (``experiment.sample_iterations`` with
``experiment.sample_halfwidth`` > 0, e.g. ``experiment=projection``).

A sampled run stands for a full run of n timed iterations after W warm-up ones. It
runs iterations until (campaign/harvest/window.py defines both rules):

1. warm-up: at least W iterations, then, at checks spaced by a factor 1.25, until
   MSER-5 over every iteration so far puts the end of the transient in their first
   half at two checks in a row (or ``sample_max_warmup`` iterations have run). Two,
   because MSER cannot see a transient's end with one batch after it: at the first
   check a transient that fills most of the iterations looks like a level. The timed
   window opens at the next iteration: its start D >= W is the data's, not a guess.
2. window: at least 64 timed iterations, then, at checks spaced by 1.25, until the
   95 % interval of the long run's mean iteration time (batch means, with the drift
   term) is no wider than ``sample_halfwidth`` of the mean (1 % by default), or
   ``sample_iterations`` timed iterations have run (the cap).

Every rank decides on its own iterations and all ranks follow the most cautious one
(a max all-reduce of a flag on a CPU group: with NCCL a gloo group, so no decision
waits on the device); so every rank runs the same iterations. A check happens between
two iterations, never inside one; its time inside the window is recorded
(``sample_check_s``) and harvest takes it back out, so the iterations and the window
are what a full run's would be.

What the run stores beside its rows (rank_timing.extra; projection.py reads them):
``sample_planned_warmup`` (W), ``sample_transient_iterations`` (D - W) and
``sample_transient_s`` (their seconds: the part of a full run's window that a
sampled run saw as warm-up, measured rather than projected), ``sample_check_s``,
``sample_checks``, ``sample_warmup`` (``settled`` or ``cap``), ``sample_stop``
(``halfwidth`` or ``cap``), ``sample_halfwidth`` (this rank's stated half-width at
the stop) and ``sample_target``.

Trainers that drive their own loop (``run(rec, n)``) get the fixed window: W warm-up
and ``sample_iterations`` timed iterations.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

from campaign.harvest.window import warmed_up, window_interval

FIRST_CHECK = 20  # iterations before the first warm-up check (MSER-5 needs four batches)
MIN_TIMED = 64  # timed iterations before the first window check (the drift term needs 8 batches)
GROWTH = 1.25  # each check comes this factor of iterations after the previous one


@dataclass(frozen=True)
class SampleRule:
    """The plan of a sampled run (campaign/launch/plan.py's ``plan['sample']``)."""

    planned_warmup: int  # W: the warm-up of the full run it stands for
    max_warmup: int  # the window opens after at most this many warm-up iterations
    max_timed: int  # the cap on timed iterations (experiment.sample_iterations)
    halfwidth: float  # relative half-width at which the window stops (experiment.sample_halfwidth)
    full_iterations: int  # n: timed iterations of the full run

    @classmethod
    def from_plan(cls, plan: dict) -> Optional["SampleRule"]:
        s = plan.get("sample")
        if not s or not s.get("halfwidth"):
            return None
        return cls(planned_warmup=int(plan["warmup"]), max_warmup=max(int(s["max_warmup"]), int(plan["warmup"])),
                   max_timed=int(plan["iterations"]), halfwidth=float(s["halfwidth"]),
                   full_iterations=int(s["full_iterations"]))


def agreement(ctx) -> Callable[[int], int]:
    """``agree(flag) -> max of flag over the ranks``: identity for one rank; otherwise a
    max all-reduce on a CPU process group (the world group under gloo, a gloo group
    beside NCCL's, made here: every rank must call this)."""
    if not ctx.distributed:
        return lambda flag: flag
    import torch
    import torch.distributed as dist

    group = None if ctx.backend == "gloo" else dist.new_group(backend="gloo")

    def agree(flag: int) -> int:
        t = torch.tensor([int(flag)], dtype=torch.int64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
        return int(t.item())

    return agree


class WindowSampler:
    """Runs a sampled run's iterations (module docstring) through its Recorder."""

    def __init__(self, rule: SampleRule, rec, agree: Callable[[int], int]):
        self.rule, self.rec, self.agree = rule, rec, agree
        self.warmup_reason: Optional[str] = None
        self.stop_reason: Optional[str] = None
        self.check_s = 0.0  # host seconds spent in window checks (inside the timed window)
        self.checks = 0
        self._xs: list[float] = []  # iteration seconds read so far (from iteration 0)

    def _seconds(self) -> list[float]:
        self._xs += self.rec.iteration_seconds(len(self._xs))
        return self._xs

    def run(self, trainer) -> None:
        """Warm up, open the window, sample until the rule stops it; closes the window."""
        rec, rule = self.rec, self.rule
        rec.warmup = rule.max_warmup  # the window opens where the data says (below), at the latest here
        next_check = max(rule.planned_warmup, FIRST_CHECK)
        next_k = min(MIN_TIMED, rule.max_timed)
        images = getattr(trainer, "images_per_step", 0)
        in_a_row = False  # the previous warm-up check found the times settled
        while True:
            rec.begin()
            loss = trainer.step(rec)
            rec.end(loss, images)
            done = rec.iterations_done
            if self.warmup_reason is None:
                if done >= rec.warmup:
                    self.warmup_reason = "cap"
                elif done >= next_check:
                    settled = self.agree(0 if warmed_up(self._seconds()) else 1) == 0
                    if settled and in_a_row:
                        rec.warmup, self.warmup_reason = done, "settled"  # the next iteration opens the window
                    in_a_row = settled
                    next_check = math.ceil(done * GROWTH)
                continue
            k = done - rec.warmup
            if k >= rule.max_timed:
                self.stop_reason = "cap"
                break
            if k >= next_k:
                t0 = time.perf_counter()
                w = window_interval(self._seconds()[rec.warmup:], rule.full_iterations)
                wide = w is None or w.halfwidth > rule.halfwidth
                go_on = self.agree(int(wide))
                self.check_s += time.perf_counter() - t0
                self.checks += 1
                if not go_on:
                    self.stop_reason = "halfwidth"
                    break
                next_k = math.ceil(k * GROWTH)
        rec.finish()

    def extra(self, rows: list[dict]) -> dict[str, Any]:
        """What the sampled run stores in rank_timing.extra (module docstring)."""
        w0, d = self.rule.planned_warmup, self.rec.warmup
        timed = [r["iter_s"] for r in rows if not r["warmup"]]
        w = window_interval(timed, self.rule.full_iterations)
        return {
            "sample_planned_warmup": w0,
            "sample_transient_iterations": max(d - w0, 0),
            "sample_transient_s": sum(r["iter_s"] for r in rows if w0 <= r["iter"] < d),
            "sample_check_s": self.check_s,
            "sample_checks": self.checks,
            "sample_warmup": self.warmup_reason,
            "sample_stop": self.stop_reason,
            "sample_halfwidth": w.halfwidth if w is not None else None,
            "sample_target": self.rule.halfwidth,
        }
