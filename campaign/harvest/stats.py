"""Statistics over repeats and over iterations.

Repeats (``repeats=K``: K points per sweep point) are summarised by their median
(what speedup and efficiency use), min, max, interquartile range, relative range
((max - min) / median) and, with K >= 5, the olympic mean (the mean without the best
and the worst repeat). Fewer repeats leave the olympic mean absent, not guessed.

The iterations of a sampled run give a percentile-bootstrap interval of their mean
(``bootstrap_mean_intervals``: 2,000 resamples, fixed seed), for every sampled attempt
at once: the attempts with the same number of iterations n share one draw of resample
indices (what a per-attempt bootstrap with the fixed seed draws for each of them), turned
into a resamples x n count matrix, so all their resampled means are one matrix product
(attempts x n) @ (n x resamples) instead of 2,000 gathers per attempt. The intervals are
those of ``bootstrap_mean_interval`` run on each attempt alone; windows longer than
``_DRAWS_PER_BLOCK`` / 2,000 (2,097) iterations draw their indices in blocks, to bound
memory (the same bootstrap, from another stretch of the seed's stream).
"""

from __future__ import annotations

from typing import Sequence

import polars as pl

OLYMPIC_MIN_REPEATS = 5
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0  # fixed: the same store always harvests to the same interval
BOOTSTRAP_LEVEL = 0.95
_DRAWS_PER_BLOCK = 1 << 22  # resample indices drawn at a time (32 MiB of counts): memory stays bounded for long windows


def repeat_stats(col: str, prefix: str, unit: str = "_s") -> list[pl.Expr]:
    """Aggregations of ``col`` over a group's repeats, named ``{prefix}{unit}``,
    ``{prefix}_min{unit}``, ``{prefix}_max{unit}``, ``{prefix}_iqr{unit}``,
    ``{prefix}_rel_range`` and ``{prefix}_olympic{unit}``."""
    c = pl.col(col)
    n = c.count()  # non-null repeats
    return [
        c.median().alias(f"{prefix}{unit}"),
        c.min().alias(f"{prefix}_min{unit}"),
        c.max().alias(f"{prefix}_max{unit}"),
        (c.quantile(0.75, "linear") - c.quantile(0.25, "linear")).alias(f"{prefix}_iqr{unit}"),
        ((c.max() - c.min()) / c.median()).alias(f"{prefix}_rel_range"),
        pl.when(n >= OLYMPIC_MIN_REPEATS)
        .then((c.sum() - c.min() - c.max()) / (n - 2))
        .otherwise(None)
        .alias(f"{prefix}_olympic{unit}"),
    ]


def olympic_mean(values: Sequence[float]) -> float | None:
    """Mean without the smallest and the largest value; None below 5 values."""
    xs = sorted(v for v in values if v is not None)
    if len(xs) < OLYMPIC_MIN_REPEATS:
        return None
    return sum(xs[1:-1]) / (len(xs) - 2)


def _bootstrap(x, level: float, resamples: int, seed: int):
    """Rows of ``x`` (attempts x n values): (mean, low, high) arrays of each row's
    percentile-bootstrap interval of its mean; every row resampled with the same indices."""
    import numpy as np

    mean = x.mean(axis=1)
    n = x.shape[1]
    if n == 1:
        return mean, mean.copy(), mean.copy()
    rng = np.random.default_rng(seed)
    block = max(1, min(resamples, _DRAWS_PER_BLOCK // n))
    sums = []
    for start in range(0, resamples, block):
        b = min(block, resamples - start)
        idx = rng.integers(0, n, size=(b, n))  # the first block is what a single draw of (resamples, n) gives
        counts = np.bincount((idx + n * np.arange(b)[:, None]).ravel(), minlength=b * n).reshape(b, n)
        sums.append(x @ counts.T.astype(np.float64))  # attempts x b sums of resampled values
    means = np.hstack(sums) / n
    tail = (1.0 - level) / 2 * 100
    lo, hi = np.percentile(means, [tail, 100 - tail], axis=1)
    return mean, lo, hi


def bootstrap_mean_interval(values: Sequence[float], level: float = BOOTSTRAP_LEVEL,
                            resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED) -> tuple[float, float, float]:
    """(mean, low, high): a percentile-bootstrap interval of the mean of ``values``.

    It treats the iterations as independent draws: it covers the noise of a short
    window, not a drift over a long run (thermal throttling, a shared file system
    slowing down), which no window shorter than the run can see.
    """
    import numpy as np

    x = np.asarray([v for v in values if v is not None], dtype=float)
    if x.size == 0:
        raise ValueError("no values to bootstrap")
    mean, lo, hi = _bootstrap(x[None, :], level, resamples, seed)
    return float(mean[0]), float(lo[0]), float(hi[0])


def bootstrap_mean_intervals(samples: pl.DataFrame, by: str = "attempt_id", value: str = "iter_s",
                             level: float = BOOTSTRAP_LEVEL, resamples: int = BOOTSTRAP_RESAMPLES,
                             seed: int = BOOTSTRAP_SEED) -> pl.DataFrame:
    """Per ``by`` group of ``samples``: ``n``, ``mean``, ``lo``, ``hi``, the group's
    ``bootstrap_mean_interval`` of its ``value``s (in their order; nulls left out),
    every group of the same size in one array operation (module docstring)."""
    import numpy as np

    schema = {by: samples.schema.get(by, pl.Int64), "n": pl.Int64, "mean": pl.Float64, "lo": pl.Float64,
              "hi": pl.Float64}
    df = samples.select(pl.col(by), pl.col(value).cast(pl.Float64)).drop_nulls(value).sort(by, maintain_order=True)
    if df.height == 0:
        return pl.DataFrame(schema=schema)
    keys, x = df[by].to_numpy(), df[value].to_numpy()
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    sizes = np.diff(np.r_[starts, keys.size])
    mean, lo, hi = (np.empty(starts.size) for _ in range(3))
    for n in np.unique(sizes):
        group = np.flatnonzero(sizes == n)
        mean[group], lo[group], hi[group] = _bootstrap(x[starts[group][:, None] + np.arange(n)], level, resamples, seed)
    return pl.DataFrame({by: keys[starts], "n": sizes, "mean": mean, "lo": lo, "hi": hi}).cast(schema)
