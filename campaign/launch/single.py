"""A single point in the foreground (``python -m campaign.launch`` without ``-m``)."""

from __future__ import annotations

import sys
import time

from omegaconf import DictConfig

from campaign.errors import CampaignError


def run_single(cfg: DictConfig) -> None:
    from campaign.cli import fail
    from campaign.launch.launcher import _container_python, preflight
    from campaign.launch.plan import plan_point
    from campaign.launch.report import print_dry_run
    from campaign.launch.submit import register_and_submit

    try:
        points = [plan_point(cfg, r, [a for a in sys.argv[1:]], repeat=r) for r in range(max(1, int(cfg.repeats)))]
        preflight(points)
        if cfg.dry_run:
            print_dry_run(points)
            return
        campaign_id, submitted = register_and_submit(
            points, store_url=str(cfg.store.url), results_dir=str(cfg.results_dir), name=cfg.get("name"),
            overrides=sys.argv[1:], python=_container_python(points),
        )
        print(f"campaign {campaign_id}: running {len(points)} point(s) in the foreground")
        for s in submitted:
            while s.job is not None and not s.job.done():
                time.sleep(0.5)
    except CampaignError as exc:
        fail(exc)
    from campaign.status import show_status

    code = show_status(campaign_id, store_url=str(cfg.store.url))
    if code:
        sys.exit(code)
