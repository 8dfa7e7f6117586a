"""How well a short window of iterations knows the rate of a long run: one definition
for the job that samples (trainers/sampling.py: when to open the window, when to stop)
and for harvest that projects (campaign/harvest/projection.py: the interval it reports).

A neutral package, like ``campaign_sql`` and ``campaign_trace``: plain Python (no
polars, no numpy, no torch), so both sides import it and neither depends on the other.

warm-up      MSER-5 (White 1997; the truncation rule Hoad, Robinson & Davies 2010
             recommend): cut the series into batches of 5, and drop the d batches that
             minimise the marginal standard error of what is left,
             sum((y - mean)^2) / (n - d)^2. The warm-up is over once that d lies in
             the first half of the iterations run so far (a d in the second half means
             the series has not settled long enough to tell).
interval     of the mean iteration time, from *batch means* (Flegal & Jones 2010): the
             window's last b*m iterations in b consecutive batches of m, b =
             min(k, max(10, isqrt(k))); the batch means are close to independent even
             when iterations are not (a neighbour's burst slows many iterations in a
             row), so t(b-1) * sd(batch means) / sqrt(b) is an honest half-width where
             an i.i.d. interval over the k iterations is too narrow.
drift        a long run is not the sample's few seconds again: the machine's level
             moves (neighbours' load, clocks, a file system). The level variance the
             window itself shows is estimated as a one-way random-effects component:
             its batch means in 4 consecutive groups, sigma_L^2 = max(0, (MS_between -
             MS_within) / g) (g batches per group). Levels persist for longer than a
             window, so the window's level is taken as *one* draw of them, and
             sigma_L^2 is added whole to the variance of the projected mean (not
             divided by the 4 groups). Under a steady rate the term is ~0 and the
             interval is the batch-means one; a window that saw the level move gets
             a wider interval (and, in a job, samples on). What no window can see (a
             change of load after it ended) stays outside: benchmarks/projection.py
             measures how often that happens.
full run     the full run's own noise (its mean over n iterations) adds the same
             variance scaled by k/n.

The stated half-width is relative to the mean: ``(t * sqrt(se^2 (1 + k/n) + sigma_L^2)) / mean``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Optional, Sequence

LEVEL = 0.95  # the interval's stated coverage
MSER_BATCH = 5
MIN_BATCHES = 10  # batch means: at least this many batches (or one per iteration in shorter windows)
LEVEL_GROUPS = 4  # groups of batch means whose spread estimates the level variance
# Student's t quantile at 0.975 for 1..30 degrees of freedom (exact to 3 decimals);
# beyond 30 the Cornish-Fisher expansion below is good to 1e-4.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t_quantile(df: int, level: float = LEVEL) -> float:
    """Two-sided Student's t quantile (``level`` = 0.95: the 0.975 quantile) for ``df`` >= 1
    degrees of freedom: a table for 0.95 and df <= 30, else the Cornish-Fisher expansion
    around the normal quantile (within 1e-3 of the exact value for df >= 3)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if abs(level - 0.95) < 1e-12 and df <= len(_T975):
        return _T975[df - 1]
    z = NormalDist().inv_cdf(0.5 + level / 2)
    v = float(df)
    return (z + (z**3 + z) / (4 * v) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * v**2)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * v**3)
            + (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / (92160 * v**4))


def mser_truncation(xs: Sequence[float], batch: int = MSER_BATCH) -> int:
    """MSER-``batch``: how many leading values to drop (a multiple of ``batch``) so that
    the rest's marginal standard error is least; 0 for fewer than two batches. Only
    truncations that leave at least two batches are considered."""
    nb = len(xs) // batch
    if nb < 2:
        return 0
    ys = [sum(xs[j * batch:(j + 1) * batch]) / batch for j in range(nb)]
    s, s2 = [0.0] * (nb + 1), [0.0] * (nb + 1)  # suffix sums: the statistic of ys[d:] in O(1)
    for j in range(nb - 1, -1, -1):
        s[j], s2[j] = s[j + 1] + ys[j], s2[j + 1] + ys[j] * ys[j]
    best_d, best = 0, math.inf
    for d in range(nb - 1):  # at least two batches left
        n = nb - d
        stat = max(s2[d] - s[d] * s[d] / n, 0.0) / (n * n)
        if stat < best:
            best_d, best = d, stat
    return best_d * batch


def warmed_up(xs: Sequence[float], batch: int = MSER_BATCH) -> bool:
    """The warm-up rule: MSER's truncation point lies in the first half of ``xs`` (which
    needs at least four batches)."""
    if len(xs) < 4 * batch:
        return False
    return mser_truncation(xs, batch) <= len(xs) / 2


def batches(k: int) -> tuple[int, int]:
    """(b, m): b batches of m iterations for a window of k (the last b*m are used)."""
    if k < 2:
        return k, 1
    b = min(k, max(MIN_BATCHES, math.isqrt(k)))
    return b, k // b


@dataclass(frozen=True)
class WindowInterval:
    """What a window of k iteration times says about the long run's mean iteration time."""

    k: int  # iterations in the window
    mean: float  # their mean (seconds)
    batches: int  # b of the batch means
    noise: float  # relative half-width from the batch means alone (the window's own noise)
    drift: Optional[float]  # relative half-width the level variance adds (None: too few batches to tell)
    halfwidth: float  # relative half-width of the whole interval (noise, drift and the full run's own noise)
    t: float  # the t quantile used (b - 1 degrees of freedom)

    @property
    def lo_factor(self) -> float:
        return 1.0 - self.halfwidth

    @property
    def hi_factor(self) -> float:
        return 1.0 + self.halfwidth


def _var(ys: Sequence[float]) -> float:
    n = len(ys)
    m = sum(ys) / n
    return sum((y - m) ** 2 for y in ys) / (n - 1)


def window_interval(xs: Sequence[float], full_iterations: Optional[int] = None,
                    level: float = LEVEL) -> Optional[WindowInterval]:
    """The interval (module docstring) of the long run's mean iteration time from the
    window's iteration times ``xs`` (in order); ``full_iterations``: the full run's n
    (its own noise, k/n of the window's; None: left out). None for fewer than 2 values."""
    k = len(xs)
    b, m = batches(k)
    if b < 2:
        return None
    used = xs[k - b * m:]
    ys = [sum(used[j * m:(j + 1) * m]) / m for j in range(b)]
    mean = sum(ys) / b
    if mean <= 0:
        return None
    se2 = _var(ys) / b
    t = t_quantile(b - 1, level)
    level_var: Optional[float] = None
    g = b // LEVEL_GROUPS
    if g >= 2:
        groups = [ys[b - LEVEL_GROUPS * g + i * g: b - LEVEL_GROUPS * g + (i + 1) * g] for i in range(LEVEL_GROUPS)]
        means = [sum(gr) / g for gr in groups]
        ms_between = g * _var(means)
        ms_within = sum(_var(gr) for gr in groups) / LEVEL_GROUPS
        level_var = max(0.0, (ms_between - ms_within) / g)
    full = k / full_iterations if full_iterations else 0.0
    total = se2 * (1.0 + full) + (level_var or 0.0)
    return WindowInterval(
        k=k, mean=mean, batches=b, noise=t * math.sqrt(se2) / mean,
        drift=None if level_var is None else t * math.sqrt(level_var) / mean,
        halfwidth=t * math.sqrt(total) / mean, t=t)
