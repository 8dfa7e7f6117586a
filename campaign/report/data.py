"""What a report shows, read once from the store: the campaign, its points with their
effective states, harvest's tables (built by harvest's own code: campaign.harvest.run's
``completed_where`` and ``_tables``, so the page's numbers are the ones harvest prints),
the comparisons, every attempt, and the provenance the jobs recorded. Read-only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import polars as pl

from campaign.observe.state import FAILED_STATES

# What ``campaign resume`` reruns (campaign.launch.resume.RESUMABLE; a read path may not
# import the launch, so the set is named here and a test holds the two equal).
RESUMABLE = FAILED_STATES + ("waiting",)


@dataclass
class ReportData:
    """Everything one report shows, each piece as harvest or status derives it."""

    campaign: dict
    points: list[dict]  # effective points (campaign.observe.state), sweep order
    tables: dict[str, pl.DataFrame]  # harvest's tables of the completed points (may be empty)
    attempts: pl.DataFrame  # harvest --table attempts
    raw_attempts: list[dict]  # Store.attempts: provenance and UTC times come from these
    comparisons: list[tuple[str, str, pl.DataFrame]] = field(default_factory=list)  # (name, title, frame)
    other_tables: dict[str, dict[str, pl.DataFrame]] = field(default_factory=dict)  # other campaign id -> tables
    warnings: list[str] = field(default_factory=list)


def gather(store: Any, ref: Optional[str], others: Sequence[str] = ()) -> ReportData:
    """The report's data of campaign ``ref`` (and the campaigns it is compared with)."""
    from campaign.harvest.attempts import attempts_table, harvested_segments
    from campaign.harvest.run import _comparison, _tables, completed_where
    from campaign.harvest.tables import POINT_TABLES
    from campaign.store import find_campaign_noted
    from campaign.store.typed import typed_attempts

    campaign = find_campaign_noted(store, ref)
    cid = campaign["id"]
    mine, points, warnings = completed_where(store, campaign, None)
    tables = _tables(store, cid, mine, POINT_TABLES, stack=True)
    raw, refused = typed_attempts(cid, store.attempts(cid))  # typed at the door, as the points are
    segments, unshown = harvested_segments(store, cid, points)
    data = ReportData(campaign, points, tables, attempts_table(points, raw, segments), raw,
                      warnings=list(warnings) + refused + unshown)
    if tables:
        from campaign.harvest.references import workload_warning

        name, title, df = _comparison("reference", tables, None, {})
        differs = workload_warning(points)  # said with the comparison, as harvest --compare reference says it
        data.comparisons.append((name, f"{title}. Note: {differs}." if differs else title, df))
    for ref_other in others:
        other = find_campaign_noted(store, ref_other)
        theirs, _, more = completed_where(store, other, None)
        data.warnings += more
        other_tables = _tables(store, other["id"], theirs, ())
        data.other_tables[other["id"]] = other_tables
        if tables:
            data.comparisons.append(_comparison(other["id"], tables, other["id"], other_tables))
    return data


def resumable(points: Sequence[dict]) -> list[dict]:
    """The points ``campaign resume`` (no ``--state``) would rerun: effective state resumable."""
    return [p for p in points if p["state"] in RESUMABLE]


def gpu_hours_used(attempts: pl.DataFrame) -> Optional[float]:
    """GPU-hours every attempt held (its elapsed time x its point's GPUs), failed ones
    included; None when no attempt has an elapsed time."""
    timed = attempts.filter(pl.col("elapsed_s").is_not_null())
    if timed.height == 0:
        return None
    return float((timed["elapsed_s"] * timed["gpus"]).sum()) / 3600.0


def gpu_hours_estimated(points: Sequence[dict]) -> tuple[Optional[float], int]:
    """The trainers' declared estimate (campaign.observe.estimate.point_cost, no measured
    rates: what the campaign was expected to cost before any of it ran) summed over the
    points whose estimate is known, and how many points have none."""
    from campaign.common.bounded import is_unreadable
    from campaign.common.errors import CampaignError
    from campaign.observe.estimate import point_cost

    total, unknown = 0.0, 0
    for p in points:
        config = p.get("config")
        if not isinstance(config, dict) or is_unreadable(config) or not p.get("iterations"):
            unknown += 1
            continue
        try:
            cost = point_cost(config, gpus=p["gpus"], nodes=p.get("nodes") or 1,
                              batch_per_gpu=p.get("batch_per_gpu") or 1, iterations=p["iterations"])
        except (CampaignError, KeyError, TypeError, ValueError):  # a stored config others shaped: no estimate
            cost = None
        if cost is None or cost.gpu_hours is None:
            unknown += 1
        else:
            total += cost.gpu_hours
    return (total if unknown < len(points) else None), unknown
