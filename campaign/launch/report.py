"""What a launch prints once its campaign is stored: the points, each submitted (with its
job) or refused (with why), what they are estimated to cost, and how to follow them.
A dry run's output: campaign/launch/dryrun.py."""

from __future__ import annotations

from typing import Any, Optional, Sequence


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
    from campaign.launch.dryrun import estimate_lines, swept_columns

    names, swept = swept_columns(points, skip=("platform", "gpus", "trainer", "experiment", "study"))
    repeats = any(p.repeat for p in points)  # repeats=K: which run of its point each row is
    rows = []
    costs = cost.points if cost is not None else [None] * len(points)
    for p, s, c, vals in zip(points, submitted, costs, swept):
        rows.append([p.idx, p.platform, p.gpus, p.config["trainer"]["name"], p.config["experiment"]["name"], *vals,
                     *([p.repeat] if repeats else []),
                     s.job_id or "-", fmt_duration(c.wall_s if c else None), fmt_gpu_hours(c.gpu_hours if c else None),
                     "submitted" if s.job_id else
                     ("waiting for room" if getattr(s, "waiting", None) else f"rejected: {redact(s.error)}")])
    done = sum(1 for s in submitted if s.job_id)
    where = "in the foreground" if not multirun and done else ""
    print(f"campaign {campaign_id}: {done} of {len(points)} point(s) submitted {where}".rstrip())
    held = [s.waiting for s in submitted if getattr(s, "waiting", None)]
    if held:  # campaign/launch/waves.py
        print(f"{len(held)} point(s) wait for room ({held[0].split('; ')[0].removeprefix('waiting for room: ')}): "
              f"campaign resume {campaign_id}{store} submits the next wave as jobs end "
              f"(or campaign status {campaign_id}{store} --wait --submit)")
    print(tables.render(rows, headers=["#", "platform", "gpus", "trainer", "experiment", *names,
                                       *(["repeat"] if repeats else []), "job", "est. time", "GPU-h", "state"]))
    if cost is not None:
        for line in estimate_lines(cost):
            print(line)
    if multirun:
        print(f"\nfollow it:  campaign status {campaign_id}{store} --wait")
        print(f"results:    campaign harvest {campaign_id}{store}")
        if "***" in store:
            print("            (the store's password is shown as ***: give the whole URL, or set $CAMPAIGN_STORE)")
    print(flush=True)
