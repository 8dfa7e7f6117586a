"""``campaign submit FILE``: a saved plan (campaign/launch/savedplan.py) checked again as a
launch checks its points, then registered and submitted exactly as it was reviewed."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Optional

from campaign.common.errors import ConfigError
from campaign.common.plan_origin import origin_suffix, short
from campaign.launch.savedplan import check_cluster, read_plan


def submit_plan(path: Path, store_url: Optional[str] = None) -> Any:
    """``campaign submit FILE``: refuse the plan (``read_plan``, ``check_cluster``, the site's
    checks as a launch makes them) or register and submit exactly its points, printing what a
    launch prints; returns the ``LaunchResult`` (``check_outcome`` says whether all went)."""
    from dataclasses import replace

    from campaign.launch.launchplan import site_checks
    from campaign.launch.run import send_plan
    from campaign.launch.submit import absolute_store_url
    from campaign.launch.timelimit import check_time_limits

    path = Path(path)
    plan, doc, digest = read_plan(path)
    where = f"plan {path}"
    if store_url:  # the store named now: each point's record of it too, as a launch with store.url= has
        store_url = absolute_store_url(store_url)
        points = tuple(replace(p, config={**p.config, "store": {**p.config["store"], "url": store_url}})
                       for p in plan.points)
        plan = replace(plan, points=points, store_url=store_url)
    folder = str(doc.get("folder") or "")
    if not os.path.isdir(folder):
        raise ConfigError(f"{where} was made in {folder or '?'}, which is gone; save the plan again")
    here = os.getcwd()
    os.chdir(folder)  # its relative paths (results_dir, the store) mean what they meant to the launch
    try:
        notes = check_cluster(plan, doc.get("cluster") or {}, where)
        check_time_limits(list(plan.points), plan.cost)
        _, writes = site_checks(list(plan.points), dry_run=False)
        for line in notes + list(writes):
            print(f"note: {line}", file=sys.stderr)
        print(f"submitting {where} ({short(digest)}): {len(plan.points)} point(s)", file=sys.stderr, flush=True)
        # never waited for, as a sweep is not (a plan of the foreground point too): followed with campaign status
        return send_plan(replace(plan, multirun=True), origin=origin_suffix(digest))
    finally:
        os.chdir(here)
