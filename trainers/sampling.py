"""A sampled run whose window the data chooses (``experiment.sample_iterations`` with
``experiment.sample_halfwidth`` > 0, e.g. ``experiment=projection``).

A sampled run stands for a full run of n timed iterations after W warm-up ones. It
runs iterations until (campaign_window/ defines both rules):

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
from typing import Any, Callable, Optional, Sequence

from campaign_window import warmed_up, window_interval

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
        w, n = int(plan["warmup"]), int(s["full_iterations"])
        # a warm-up never costs more than a tenth of the full run it stands for
        return cls(planned_warmup=w, max_warmup=max(w, min(int(s["max_warmup"]), w + n // 10)),
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


class WindowRule:
    """The decisions alone (module docstring), with no Recorder and no ranks: told after
    every iteration how many have run, it reads their seconds only at its checks. The
    job's sampler runs it live; benchmarks/projection.py replays it on a full run's own
    iterations."""

    def __init__(self, rule: SampleRule, agree: Callable[[int], int] = lambda flag: flag):
        self.rule, self.agree = rule, agree
        self.window_start = rule.max_warmup  # D: the first timed iteration (the cap until the data says)
        self.warmup_reason: Optional[str] = None
        self.stop_reason: Optional[str] = None
        self._next_check = max(rule.planned_warmup, FIRST_CHECK)
        self._next_k = min(MIN_TIMED, rule.max_timed)
        self._in_a_row = False  # the previous warm-up check found the times settled

    def window_check_due(self, done: int) -> bool:
        """Whether ``after(done, ...)`` will read the window (a check inside the timed window)."""
        k = done - self.window_start
        return self.warmup_reason is not None and k < self.rule.max_timed and k >= self._next_k

    def after(self, done: int, seconds: Callable[[], Sequence[float]]) -> bool:
        """After ``done`` iterations (``seconds()``: theirs so far, from iteration 0): True
        when the run should stop. Sets ``window_start`` once the warm-up is over."""
        if self.warmup_reason is None:
            if done >= self.window_start:
                self.warmup_reason = "cap"
            elif done >= self._next_check:
                settled = self.agree(0 if warmed_up(seconds()) else 1) == 0
                if settled and self._in_a_row:
                    self.window_start, self.warmup_reason = done, "settled"  # the next iteration opens the window
                self._in_a_row = settled
                self._next_check = math.ceil(done * GROWTH)
            return False
        k = done - self.window_start
        if k >= self.rule.max_timed:
            self.stop_reason = "cap"
            return True
        if k >= self._next_k:
            w = window_interval(seconds()[self.window_start:], self.rule.full_iterations)
            if not self.agree(int(w is None or w.halfwidth > self.rule.halfwidth)):
                self.stop_reason = "halfwidth"
                return True
            self._next_k = math.ceil(k * GROWTH)
        return False


class WindowSampler:
    """Runs a sampled run's iterations (module docstring) through its Recorder."""

    def __init__(self, rule: SampleRule, rec, agree: Callable[[int], int]):
        self.rule, self.rec = rule, rec
        self.decide = WindowRule(rule, agree)
        self.check_s = 0.0  # host seconds spent in window checks (inside the timed window)
        self.checks = 0
        self._xs: list[float] = []  # iteration seconds read so far (from iteration 0)

    def _seconds(self) -> list[float]:
        self._xs += self.rec.iteration_seconds(len(self._xs))
        return self._xs

    def run(self, trainer) -> None:
        """Warm up, open the window, sample until the rule stops it; closes the window."""
        rec, decide = self.rec, self.decide
        images = getattr(trainer, "images_per_step", 0)
        while True:
            rec.warmup = decide.window_start  # the Recorder opens its window at this iteration
            rec.begin()
            loss = trainer.step(rec)
            rec.end(loss, images)
            done = rec.iterations_done
            inside = decide.window_check_due(done)
            t0 = time.perf_counter()
            stop = decide.after(done, self._seconds)
            if inside:
                self.check_s += time.perf_counter() - t0
                self.checks += 1
            if stop:
                break
        rec.warmup = decide.window_start
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
            "sample_warmup": self.decide.warmup_reason,
            "sample_stop": self.decide.stop_reason,
            "sample_halfwidth": w.halfwidth if w is not None else None,
            "sample_target": self.rule.halfwidth,
        }
