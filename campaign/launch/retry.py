"""``campaign launch --retry CAMPAIGN``: submit the points of a stored campaign that never
reached their scheduler (``rejected`` by it, or left ``registered``), as they were
planned, once the cause (SLURM down, a full disk, ...) is gone. Points that ran are
left alone: rerun those with a new launch."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Optional, Sequence

from campaign.errors import EXIT_OK, CampaignError, ConfigError
from campaign.launch.run import LaunchResult

RETRYABLE = ("rejected", "registered")


def retry(ref: Optional[str], store_url: str) -> LaunchResult:
    """Plan again, check and submit the campaign's unsubmitted points; returns what happened."""
    from campaign.launch.plan import plan_point
    from campaign.launch.preflight import preflight
    from campaign.launch.report import print_submitted
    from campaign.launch.run import job_returns, store_option
    from campaign.launch.submit import absolute_store_url, job_python, private_files, submit_registered
    from campaign.store import open_store

    store_url = absolute_store_url(store_url)
    with private_files(), open_store(store_url) as store:
        camp = store.resolve_campaign(ref)
        cid = camp["id"]
        rows = [r for r in store.points(cid) if r["state"] in RETRYABLE and not r.get("job_id")]
        if not rows:
            raise CampaignError(f"campaign {cid}: every point reached its scheduler; nothing to retry "
                                "(rerun failed points with a new campaign launch)")
        points = []
        for r in rows:
            config = dict(r["config"])
            config["store"] = dict(config["store"], url=store_url)  # the stored one is redacted
            try:
                points.append(plan_point(config, r["idx"], list(r.get("overrides") or []), repeat=r.get("repeat") or 0))
            except ConfigError as exc:
                raise ConfigError(f"campaign {cid} point #{r['idx']}: {exc}") from None
        results = str(camp.get("results_dir") or points[0].config["results_dir"])
        for p in points:
            p.config["results_dir"] = results
        preflight(points)
        for r in rows:
            store.set_state(r["id"], "registered", None, only_from=RETRYABLE)
        ids = [r["id"] for r in rows]
        folder = Path(results) / "jobs" / cid
        submitted = submit_registered(store, points, ids, cid, store_url, folder, job_python(points))
    result = LaunchResult(cid, points, store_url, results, True, submitted)
    print_submitted(cid, points, submitted, store_option(result))
    job_returns(result, None, waited=False)
    return result


def retry_main(argv: Sequence[str], prog: str) -> int:
    """``campaign launch --retry [CAMPAIGN] [--store URL]``; exit status as a launch's."""
    from campaign.launch.run import check_outcome
    from campaign.store import default_store_url

    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    parser.add_argument("campaign", nargs="?", help="campaign id, unique id prefix or name (default: the latest)")
    parser.add_argument("--store", metavar="URL", default=None,
                        help="results store; default $CAMPAIGN_STORE or sqlite:///results/campaign.db")
    args = parser.parse_args(list(argv))
    check_outcome(retry(args.campaign, args.store or default_store_url()))
    return EXIT_OK
