"""A point's estimated wall time against its platform's time limit, before anything is stored.

A job that cannot finish within its limit ends ``timeout`` with its work lost, unless it
checkpoints (``experiment.checkpoint=true``: the scheduler requeues it and the next attempt
resumes). The launch refuses such a point, naming the fixes, unless it is meant to run into
its limit (``experiment.until_time_limit=true``: a slice of a longer run, a timeout test); a dry run shows the same
refusal as a note beside its estimate. Only a known estimate is compared (the store's
measured rate, a trainer's time law or its declared FLOPs, ``campaign/observe/estimate.py``): an
unknown one never refuses.
"""

from __future__ import annotations

from typing import Any, Sequence

from campaign.common.errors import ConfigError
from campaign.observe.estimate import CampaignCost, PointCost, fmt_duration


def _limit(minutes: int) -> str:
    return f"{minutes // 60}:{minutes % 60:02d}:00"  # as the dry run's time limit column shows it


def over_limit(point: Any, cost: PointCost) -> str | None:
    """One line refusing ``point`` (a ``PointPlan``) when its estimated wall time is over its
    platform's time limit and it does not checkpoint; None when it fits, checkpoints or its
    estimate is unknown."""
    from campaign.launch.validate import declaration_of

    config = point.config
    wall, minutes = cost.wall_s, int(point.resources.timeout_min)
    exp = config["experiment"]
    if wall is None or wall <= minutes * 60 or exp.get("checkpoint") or exp.get("until_time_limit"):
        return None
    needed = -(-int(wall) // 60)  # whole minutes, rounded up
    fixes = [f"platform.time_limit_min={needed} where the partition allows it",
             "the projection pilot first (experiment=projection)",
             "experiment.until_time_limit=true to run into the limit on purpose"]
    if declaration_of(config).checkpoint:
        fixes.insert(0, "experiment.checkpoint=true (each attempt resumes where the last one stopped)")
    return (f"point {point.label()}: estimated wall time {fmt_duration(wall)} is over platform "
            f"{point.platform}'s time limit {_limit(minutes)} and nothing resumes it; use "
            + ", or ".join(fixes))


def time_limit_refusals(points: Sequence[Any], cost: CampaignCost) -> list[str]:
    """The refusal of every point that cannot finish within its time limit (``over_limit``)."""
    return [line for p, c in zip(points, cost.points) if (line := over_limit(p, c))]


def check_time_limits(points: Sequence[Any], cost: CampaignCost) -> None:
    """Refuse (``ConfigError``, exit 2, nothing stored) a launch with a point that cannot
    finish within its time limit: the first such point's line, and how many more."""
    refusals = time_limit_refusals(points, cost)
    if refusals:
        more = f" ({len(refusals) - 1} more point(s) likewise; --dry-run lists them)" if len(refusals) > 1 else ""
        raise ConfigError(refusals[0] + more)
