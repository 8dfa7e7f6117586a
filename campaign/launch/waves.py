"""Campaigns larger than the scheduler takes at once go out in waves.

A cluster caps the jobs one user (or everybody) may have queued: SLURM's
``MaxJobCount`` (the controller's), an association's or a QOS's ``MaxSubmitJobs``,
and ``platform.max_submit`` (a cap of one's own, on any executor). Each executor
says what room each cap leaves now (``Backend.limits``: a ``Limit`` per cap); a wave
is the points, in sweep order, that fit in every cap that applies to them. The rest
stay ``waiting``, with the cap that holds them back; ``campaign resume`` (or ``campaign
status --wait --submit``) submits the next wave once jobs have ended.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from campaign.backends.base import Limit

RESUME_HINT = "campaign resume submits it when jobs end"


@dataclass
class Wave:
    """Which points go now (indices into the planned points) and why the others wait."""

    now: list[int] = field(default_factory=list)
    later: dict[int, str] = field(default_factory=dict)  # index -> the reason it waits


def plan_wave(count: int, limits: Sequence[Limit]) -> Wave:
    """The points ``0..count-1`` (sweep order) that fit every cap that applies to them."""
    left = [max(0, int(limit.room)) for limit in limits]
    wave = Wave()
    for i in range(count):
        full = [k for k, limit in enumerate(limits) if limit.applies(i) and left[k] <= 0]
        if full:
            wave.later[i] = waiting_reason(limits[full[0]])
            continue
        for k, limit in enumerate(limits):
            if limit.applies(i):
                left[k] -= 1
        wave.now.append(i)
    return wave


def waiting_reason(limit: Limit) -> str:
    """Why a point waits, in one line: the cap and what fills it."""
    used = f", {limit.used} jobs queued" if limit.used is not None else ""
    return f"waiting for room: {limit.what}{used}; {RESUME_HINT}"


def wave_for(plans: Sequence[Any]) -> Wave:
    """The wave of ``plans`` (PointPlans, sweep order) that their executors take now."""
    from campaign.backends import get_backend

    by_executor: dict[str, list[int]] = {}
    for i, p in enumerate(plans):
        by_executor.setdefault(p.executor, []).append(i)
    wave = Wave()
    for executor, idx in by_executor.items():
        limits = get_backend(executor).limits([plans[i] for i in idx])
        sub = plan_wave(len(idx), limits)
        wave.now += [idx[j] for j in sub.now]
        wave.later.update({idx[j]: why for j, why in sub.later.items()})
    wave.now.sort()
    return wave
