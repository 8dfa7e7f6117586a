"""Campaigns larger than the scheduler takes at once go out in waves.

A cluster caps the jobs one user (or everybody) may have queued: SLURM's
``MaxJobCount`` (the controller's), an association's or a QOS's ``MaxSubmitJobs``;
each executor says what room each of its caps leaves now (``Backend.limits``: a
``Limit`` per cap). ``platform.max_submit`` is a cap of one's own, on any executor: at
most that many of the campaign's points of that platform in the scheduler at once. A
wave is the points, in sweep order, that fit in every cap that applies to them. The rest
stay ``waiting``, with the cap that holds them back; ``campaign resume`` (or ``campaign
status --wait --submit``) submits the next wave once jobs have ended.

A cap's room is what the scheduler admits, less what it needs for itself: under SLURM's
MaxJobCount a wave leaves ``1 + 10 %`` of it free (the controller never holds the last
record; other users' jobs arrive and ended ones linger for MinJobAge:
campaign/backends/slurm_limits.py). A submission that meets a full scheduler anyway (sbatch:
"temporarily unable to accept job") leaves its points, and those after it, ``waiting`` for
the next wave (``Submitted.waiting`` from the backend), never ``rejected``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

from campaign.backends.base import Limit
from campaign.backends.sbatch import FULL_HINT

RESUME_HINT = FULL_HINT  # one wording for a point waiting for room, whatever said there was none
IN_FLIGHT = ("pending", "running", "requeued")  # a point's job is in its scheduler


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


def campaign_limits(plans: Sequence[Any], in_flight: Optional[Mapping[str, int]] = None) -> list[Limit]:
    """``platform.max_submit``: at most that many of the campaign's points of that platform
    in the scheduler at once (``in_flight``: platform name -> its points pending, running or
    requeued now)."""
    caps: dict[tuple[str, int], list[int]] = {}
    for i, p in enumerate(plans):
        cap = p.config["platform"].get("max_submit")
        if cap:
            caps.setdefault((p.config["platform"]["name"], int(cap)), []).append(i)
    used = dict(in_flight or {})
    return [Limit(f"platform.max_submit={cap} of platform {name} (this campaign's points in the scheduler at once)",
                  cap - used.get(name, 0), frozenset(idx)) for (name, cap), idx in caps.items()]


def in_flight(points: Sequence[dict]) -> dict[str, int]:
    """platform name -> the campaign's points in its scheduler now (effective states)."""
    out: dict[str, int] = {}
    for p in points:
        if p["state"] in IN_FLIGHT:
            out[p["platform"]] = out.get(p["platform"], 0) + 1
    return out


def wave_for(plans: Sequence[Any], flying: Optional[Mapping[str, int]] = None) -> Wave:
    """The wave of ``plans`` (PointPlans, sweep order) that their executors take now, under
    the scheduler's caps and the campaign's own (``flying``: ``in_flight`` of the campaign)."""
    from campaign.backends import get_backend

    by_executor: dict[str, list[int]] = {}
    for i, p in enumerate(plans):
        by_executor.setdefault(p.executor, []).append(i)
    wave = Wave()
    for executor, idx in by_executor.items():
        mine = [plans[i] for i in idx]
        limits = get_backend(executor).limits(mine) + campaign_limits(mine, flying)
        sub = plan_wave(len(idx), limits)
        wave.now += [idx[j] for j in sub.now]
        wave.later.update({idx[j]: why for j, why in sub.later.items()})
    wave.now.sort()
    return wave
