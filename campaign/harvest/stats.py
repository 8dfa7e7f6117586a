"""Statistics over repeats.

Repeats (``repeats=K``: K points per sweep point) are summarised by their median
(what speedup and efficiency use), min, max, interquartile range, relative range
((max - min) / median) and, with K >= 5, the olympic mean (the mean without the best
and the worst repeat). Fewer repeats leave the olympic mean absent, not guessed.

The interval of a sampled run's mean iteration time is campaign_window's.
"""

from __future__ import annotations

from typing import Sequence

import polars as pl

OLYMPIC_MIN_REPEATS = 5


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
