"""The known-answer trainer: sleeps an exact law instead of computing.

The law is the *job's* time per image of the training set on N ranks:

    t(N) = a/N + b*log2(N) + c + d*(N-1)/N^2    (seconds per image; params a_s, b_s, c_s, d_s)

a is the parallel part (divided over the ranks), b the communication cost per
doubling of N, c the serial part no rank count shortens, d a ring all-reduce: per
iteration it costs B*d*(N-1)/N, the ring's 2(N-1)/N x bytes / bandwidth shape (default
0). harvest's model (campaign/harvest/model.py, docs/model.md) names the same law
t(N) = a' + b'/N + c'*log2(N) + d'*r(N) with a' = c_s, b' = a_s, c' = b_s, d' = d_s.
``noise`` (relative, default 0) scales one run's whole law by 1 + e, e ~ Normal(0,
noise), drawn once per job from ``noise_seed`` and the point's seed (the repeat's), so
every rank sleeps the same law and each repeat draws its own. An iteration processes
N*B images (B = images per GPU), so each rank's iteration lasts N*B*t(N), made of
three phases the Recorder sees as real ones:

    data     N*B*c               (the serial part: a wait every rank sits through)
    forward  B*a                 (this rank's share of the parallel part)
    comm     N*B*b*log2(N) + B*d*(N-1)/N   (absent with one rank: nothing to communicate)

What follows for a harvest (stated again in tests/test_harvest_sleep.py): with the
same images for every N (weak scaling 160K/N, or strong scaling), time to solution
is images*t(N), so speedup T(1)/T(N) = t(1)/t(N) and efficiency = t(1)/(N*t(N));
the throughput view gives the same numbers (images/s of the job = 1/t(N)), while
the per-iteration time grows as N*B*t(N).

Sleeps run to absolute deadlines counted from the first step, so a late wake-up
shortens the next sleep instead of adding up: the window's total and the median
iteration stay on the law however loaded the machine is. No tensor is computed;
ranks do not communicate (the law stands in for it), but they run as N processes
of the real job path (process group, Recorder, writer).

Test-only knobs: ``fail_rank`` (with ``fail_at_iteration``, default 0) makes that rank
raise at the start of that iteration, as a rank that crashes mid-run would;
``stall_rank`` (with ``stall_s``) makes that rank stall that long in its first
iteration, as a hung rank would, while its peers go on to wait for it.
"""

from __future__ import annotations

import math
import time
from typing import Optional

import torch

from trainers.dist import DistContext
from trainers.instrument import Recorder
from trainers.specs.sleep import TRAINER

DEFAULTS = TRAINER.defaults()  # declared once, in trainers/specs/sleep.py


def law(n: int, a_s: float, b_s: float, c_s: float, d_s: float = 0.0) -> float:
    """t(N): the job's seconds per image on ``n`` ranks."""
    return a_s / n + b_s * math.log2(n) + c_s + d_s * (n - 1) / n ** 2


def phases(n: int, batch: int, a_s: float, b_s: float, c_s: float, d_s: float = 0.0,
           scale: float = 1.0) -> list[tuple[str, float]]:
    """One rank's iteration as (phase, seconds); they add up to scale*n*batch*law(n)."""
    comm = n * batch * b_s * math.log2(n) + batch * d_s * (n - 1) / n
    out = [("data", n * batch * c_s * scale), ("forward", batch * a_s * scale), ("comm", comm * scale)]
    return [(p, s) for p, s in out if s > 0]


def noise_scale(noise: float, noise_seed: int, point_seed: int) -> float:
    """One run's factor 1 + e on its law, e ~ Normal(0, noise), the same on every rank
    (seeded by ``noise_seed`` and the point's own seed); never below 0.05."""
    import random

    if noise <= 0:
        return 1.0
    return max(1.0 + random.Random(f"{noise_seed}:{point_seed}").gauss(0.0, noise), 0.05)


class SleepTrainer:
    def __init__(self, ctx: DistContext, cfg: dict, plan: dict):
        params = {**DEFAULTS, **(cfg["trainer"].get("params") or {})}
        try:
            a, b, c, d, noise = (float(params.get(k) or 0.0) for k in ("a_s", "b_s", "c_s", "d_s", "noise"))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"trainer.params a_s, b_s, c_s, d_s, noise must be numbers, got {params}") from exc
        if min(a, b, c, d, noise) < 0:
            raise ValueError(f"trainer.params a_s, b_s, c_s, d_s, noise must be >= 0, got a_s={a} b_s={b} c_s={c} "
                             f"d_s={d} noise={noise}")
        self.model = torch.nn.Identity()  # the contract's model: nothing to train
        self.trainable_params = 0
        self.images_per_step = int(plan["batch_per_gpu"])
        scale = noise_scale(noise, int(params.get("noise_seed") or 0), int(plan.get("seed") or 0))
        self.phases = phases(ctx.world_size, self.images_per_step, a, b, c, d, scale)
        self._deadline: Optional[float] = None
        self.rank = ctx.rank
        fail = params.get("fail_rank")
        self.fail_rank = int(fail) if fail is not None else None
        self.fail_at_iteration = int(params.get("fail_at_iteration") or 0)
        stall = params.get("stall_rank")
        self.stall_rank = int(stall) if stall is not None else None
        self.stall_s = float(params.get("stall_s") or 0.0)
        self._i = 0

    def resume_at(self, iteration: int) -> None:
        """Continue a checkpointed run at ``iteration`` (the fail knob counts from it; the
        sleeps' deadlines start again from the first step)."""
        self._i = int(iteration)
        self._deadline = None

    def step(self, rec: Recorder) -> None:
        if self.rank == self.fail_rank and self._i == self.fail_at_iteration:
            raise RuntimeError(f"injected failure (trainer.params.fail_rank={self.rank}) at iteration {self._i}")
        if self.rank == self.stall_rank and self._i == 0:
            time.sleep(self.stall_s)
        self._i += 1
        if self._deadline is None:
            self._deadline = time.perf_counter()
        for phase, seconds in self.phases:
            self._deadline += seconds
            left = self._deadline - time.perf_counter()
            if left > 0:
                time.sleep(left)
            rec.mark(phase)
        return None  # no loss: nothing is trained


def build(ctx: DistContext, cfg: dict, plan: dict) -> SleepTrainer:
    return SleepTrainer(ctx, cfg, plan)
