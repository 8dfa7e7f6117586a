"""What a launch prints once its campaign is stored: the points, each submitted (with its
job) or refused (with why), what they are estimated to cost, and how to follow them.
A dry run's output: campaign/launch/dryrun.py."""

from __future__ import annotations

from typing import Any, Optional, Sequence

ROWS_SHOWN = 50  # a larger campaign's launch prints a row per group of points (campaign status lists each)

from campaign.observe.estimate import CampaignCost, fmt_duration, fmt_gpu_hours
from campaign.launch.plan import PointPlan
from campaign.common import table as tables
from campaign.common.redact import redact


def print_submitted(campaign_id: str, points: Sequence[PointPlan], submitted: Sequence[Any], store: str, *,
                    multirun: bool = True, cost: Optional[CampaignCost] = None) -> None:
    """The campaign's points, each submitted (with its job) or refused (with why), the keys
    its sweep varies (a column each: campaign.launch.dryrun.swept_columns), their
    estimated wall time and GPU-hours, and the commands that follow it; ``store`` is the
    ``--store`` option they need ("" for the default)."""
    from campaign.launch.dryrun import estimate_lines

    costs = cost.points if cost is not None else [None] * len(points)
    if len(points) > ROWS_SHOWN:
        headers, rows = _grouped(points, submitted, costs)
    else:
        headers, rows = _each(points, submitted, costs)
    done = sum(1 for s in submitted if s.job_id)
    where = "in the foreground" if not multirun and done else ""
    print(f"campaign {campaign_id}: {done} of {len(points)} point(s) submitted {where}".rstrip())
    held = [s.waiting for s in submitted if getattr(s, "waiting", None)]
    if held:  # campaign/launch/waves.py
        print(f"{len(held)} point(s) wait for room ({held[0].split('; ')[0].removeprefix('waiting for room: ')}): "
              f"campaign resume {campaign_id}{store} submits the next wave as jobs end "
              f"(or campaign status {campaign_id}{store} --wait --submit)")
    print(tables.render(rows, headers=headers))
    if len(points) > ROWS_SHOWN:
        print(f"({len(points):,} points in {len(rows)} group(s): campaign status {campaign_id}{store} lists each)")
    if cost is not None:
        for line in estimate_lines(cost):
            print(line)
    if multirun:
        print(f"\nfollow it:  campaign status {campaign_id}{store} --wait")
        print(f"results:    campaign harvest {campaign_id}{store}")
        if "***" in store:
            print("            (the store's password is shown as ***: give the whole URL, or set $CAMPAIGN_STORE)")
    print(flush=True)


def _state(s: Any) -> str:
    return ("submitted" if s.job_id else
            ("waiting for room" if getattr(s, "waiting", None) else f"rejected: {redact(s.error)}"))


def _each(points: Sequence[PointPlan], submitted: Sequence[Any], costs: Sequence[Any]) -> tuple[list[str], list[list]]:
    """A row a point: its swept values, repeat, job, estimate and state."""
    from campaign.launch.dryrun import swept_columns

    names, swept = swept_columns(points, skip=("platform", "gpus", "trainer", "experiment", "study"))
    repeats = any(p.repeat for p in points)  # repeats=K: which run of its point each row is
    rows = [[p.idx, p.platform, p.gpus, p.config["trainer"]["name"], p.config["experiment"]["name"], *vals,
             *([p.repeat] if repeats else []), s.job_id or "-", fmt_duration(c.wall_s if c else None),
             fmt_gpu_hours(c.gpu_hours if c else None), _state(s)]
            for p, s, c, vals in zip(points, submitted, costs, swept)]
    return ["#", "platform", "gpus", "trainer", "experiment", *names, *(["repeat"] if repeats else []),
            "job", "est. time", "GPU-h", "state"], rows


def _grouped(points: Sequence[PointPlan], submitted: Sequence[Any], costs: Sequence[Any]) -> tuple[list[str], list[list]]:
    """A row a group of points that share platform, GPUs, trainer, experiment and state, in
    the order the groups first appear: their count, point numbers and jobs (first and last),
    the longest estimated time and the GPU-hours of all (``-`` where one has none)."""
    groups: dict[tuple, list] = {}
    for p, s, c in zip(points, submitted, costs):
        key = (p.platform, p.gpus, p.config["trainer"]["name"], p.config["experiment"]["name"], _state(s))
        groups.setdefault(key, []).append((p, s, c))
    rows = []
    for (platform, gpus, trainer, experiment, state), members in groups.items():
        ids = [p.idx for p, _, _ in members]
        jobs = [s.job_id for _, s, _ in members if s.job_id]
        walls = [c.wall_s if c else None for _, _, c in members]
        hours = [c.gpu_hours if c else None for _, _, c in members]
        rows.append([_span(ids), platform, gpus, trainer, experiment,
                     len(members), (f"{jobs[0]} .. {jobs[-1]}" if len(jobs) > 1 else jobs[0]) if jobs else "-",
                     fmt_duration(None if None in walls else max(walls)),
                     fmt_gpu_hours(None if None in hours else sum(hours)), state])
    return ["#", "platform", "gpus", "trainer", "experiment", "points", "jobs", "est. time (longest)", "GPU-h",
            "state"], rows


def _span(ids: Sequence[int]) -> str:
    """``7``, ``0..99`` (every number between), ``0,8,..,9992`` (some between)."""
    if len(ids) == 1:
        return str(ids[0])
    if ids[-1] - ids[0] == len(ids) - 1:
        return f"{ids[0]}..{ids[-1]}"
    return f"{ids[0]},{ids[1]},..,{ids[-1]}" if len(ids) > 2 else f"{ids[0]},{ids[1]}"
