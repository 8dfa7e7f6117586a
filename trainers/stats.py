"""Small statistics of per-iteration seconds (plain Python): percentiles, the
breakdown's summary row, the length of a union of intervals."""

from __future__ import annotations

import statistics


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100) of a non-empty list."""
    xs = sorted(values)
    if len(xs) == 1:
        return xs[0]
    pos = (len(xs) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def stats_row(phase: str, values: list[float]) -> dict:
    """One ``breakdown`` row: total, mean, median and p95 of per-iteration seconds."""
    vals = list(values)
    return {"phase": phase, "total_s": sum(vals), "mean_s": statistics.fmean(vals) if vals else None,
            "median_s": statistics.median(vals) if vals else None,
            "p95_s": percentile(vals, 95) if vals else None, "count": len(vals)}


def union_length(intervals: list[tuple[float, float]]) -> float:
    """Total length covered by possibly overlapping ``(start, end)`` intervals."""
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total
