"""Interval arithmetic on ``(start, end)`` pairs: union, overlap, clipping.

Every figure of a trace that could double count (a kernel and the operator that
launched it, two streams busy at once, nested operators) is the length of a
*union*, never a sum, so no busy time exceeds the window it lies in.
"""

from __future__ import annotations

from typing import Iterable

Interval = tuple[float, float]


def merge(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, disjoint intervals covering exactly what ``intervals`` cover (empty ones dropped)."""
    out: list[list[float]] = []
    for s, e in sorted(iv for iv in intervals if iv[1] > iv[0]):
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1][1] = e
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def length(merged: Iterable[Interval]) -> float:
    """Total length of disjoint intervals (the output of ``merge``)."""
    return sum(e - s for s, e in merged)


def union_length(intervals: Iterable[Interval]) -> float:
    """Length covered by possibly overlapping intervals."""
    return length(merge(intervals))


def overlap(a: list[Interval], b: list[Interval]) -> float:
    """Length of the intersection of two merged interval lists."""
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            total += hi - lo
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def clip(intervals: Iterable[Interval], lo: float, hi: float) -> list[Interval]:
    """The parts of ``intervals`` inside ``[lo, hi]`` (empty parts dropped)."""
    out = []
    for s, e in intervals:
        s, e = max(s, lo), min(e, hi)
        if e > s:
            out.append((s, e))
    return out


def uncovered(a: Iterable[Interval], b: Iterable[Interval]) -> tuple[float, float]:
    """(length of the union of ``a``, the part of it no interval of ``b`` covers)."""
    ma, mb = merge(a), merge(b)
    busy = length(ma)
    return busy, max(busy - overlap(ma, mb), 0.0)
