"""What a report shows, read once from the store: the campaign (or several read as one:
campaign.harvest.several), its points with their effective states, harvest's tables (built
by harvest's own code: campaign.harvest.run's ``completed_where`` and ``merged_tables``, so
the page's numbers are the ones harvest prints), a study campaign's declared tables and
figures (campaign.report.study, drawn as ``campaign figures`` draws them), the comparisons,
every attempt, and the provenance the jobs recorded. Read-only.
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
    campaigns: list[dict] = field(default_factory=list)  # every campaign read as one ([] or one: ``campaign``)
    notes: list[str] = field(default_factory=list)  # the points several campaigns' newer attempts left out
    study: Any = None  # campaign.report.study.StudyShown of a study campaign, else None

    @property
    def several(self) -> bool:
        """Whether the page reads more than one campaign as one."""
        return len(self.campaigns) > 1


def gather(store: Any, refs: Sequence[str] = (), others: Sequence[str] = ()) -> ReportData:
    """The report's data of the campaigns ``refs`` name, read as one (none: the latest; a name
    several campaigns share: all of them), and of the campaigns it is compared with."""
    from campaign.harvest.run import _comparison, _tables, completed_where, merged_tables
    from campaign.harvest.several import completed_over, resolve_campaigns
    from campaign.harvest.tables import POINT_TABLES
    from campaign.report.study import study_shown
    from campaign.store import find_campaign_noted

    campaigns = resolve_campaigns(store, list(refs))
    if len(campaigns) == 1:
        mine, points, warnings = completed_where(store, campaigns[0], None)
        each = {campaigns[0]["id"]: points}
    else:
        mine, each, warnings = completed_over(store, campaigns, None)
        points = [p for theirs in each.values() for p in theirs]
    tables, notes = merged_tables(store, campaigns, mine, POINT_TABLES, stack=True)
    attempts, raw, more = _attempts(store, campaigns, each)
    data = ReportData(campaigns[0], points, tables, attempts, raw, warnings=list(warnings) + more,
                      campaigns=campaigns, notes=notes)
    if tables:
        from campaign.harvest.references import workload_warning

        name, title, df = _comparison("reference", tables, None, {})
        differs = workload_warning(points)  # said with the comparison, as harvest --compare reference says it
        data.comparisons.append((name, f"{title}. Note: {differs}." if differs else title, df))
        data.study = study_shown(store, campaigns, points, data.warnings)
    for ref_other in others:
        other = find_campaign_noted(store, ref_other)
        theirs, _, more = completed_where(store, other, None)
        data.warnings += more
        other_tables = _tables(store, other["id"], theirs, ())
        data.other_tables[other["id"]] = other_tables
        if tables:
            data.comparisons.append(_comparison(other["id"], tables, other["id"], other_tables))
    return data


def _attempts(store: Any, campaigns: Sequence[dict], each: dict[str, list[dict]]
              ) -> tuple[pl.DataFrame, list[dict], list[str]]:
    """harvest --table attempts of the campaigns (several: one table, each row with its
    campaign_id first), their stored attempts and the warnings of reading them."""
    from campaign.harvest.attempts import attempts_table, harvested_segments
    from campaign.store.typed import typed_attempts

    frames, raws, warnings = [], [], []
    for c in campaigns:
        cid = c["id"]
        raw, refused = typed_attempts(cid, store.attempts(cid))  # typed at the door, as the points are
        segments, unshown = harvested_segments(store, cid, each[cid])
        frame = attempts_table(each[cid], raw, segments)
        frames.append(frame.select(pl.lit(cid).alias("campaign_id"), pl.all()) if len(campaigns) > 1 else frame)
        raws += raw
        warnings += refused + unshown
    return (frames[0] if len(frames) == 1 else pl.concat(frames, how="diagonal_relaxed")), raws, warnings


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
