"""``campaign status``, ``cancel`` and ``ingest``: adapters over campaign.observe.status,
campaign.observe.cancel and campaign.observe.ingest (each raises; campaign.cli.exits reports).

Exit status (README, "Exit status"): ``status`` 0 (``--wait``: 1 when a point did not
complete, 124 when ``--timeout`` ran out first); ``cancel`` 0; ``ingest`` 0, 1 when a
malformed spool file was quarantined; 2 for bad input or a store it cannot use.
"""

from __future__ import annotations

import argparse

from campaign.cli.parser import CAMPAIGN_HELP, INT64, INTERVAL, SECONDS, command, store_arg
from campaign.common.errors import CampaignError


def add_status(sub: argparse._SubParsersAction) -> None:
    """``campaign status``."""
    st = command(sub, "status", help="what ran, what pends, what failed and why",
                 description="One row per point of a campaign (the latest by default): its state, "
                             "progress (iteration i/n, iterations/s, time left) and the values that differ "
                             "between the points; then the campaign's progress bar and ETA.",
                 epilog="examples:\n  campaign status\n  campaign status main-job --wait\n"
                        "  campaign status 20261121-1057 --wait --timeout 600   # exit 124 if still running then\n"
                        "  campaign status --watch\n  campaign status --json | jq .progress",
                 handler=status)
    st.add_argument("campaign", nargs="?", help=CAMPAIGN_HELP)
    store_arg(st)
    st.add_argument("--json", action="store_true", help="machine-readable output")
    st.add_argument("--wait", action="store_true", help="block until every point is final, then one summary line; "
                                                        "exit 1 if any did not complete")
    st.add_argument("--watch", action="store_true", help="redraw the table live until every point is final (Ctrl-C stops)")
    st.add_argument("--interval", type=INTERVAL, default=2.0,
                    help="seconds between refreshes with --wait/--watch, 0.1 to 86400 (default 2)")
    st.add_argument("--timeout", type=SECONDS, default=None, metavar="SECONDS",
                    help="with --wait: give up after this many seconds (exit 124, with a summary and the ETA)")
    st.add_argument("--submit", action="store_true",
                    help="with --wait: also submit what the campaign has due (writes the store): the next wave of "
                         "waiting points as room frees, and points that failed for a retry_on reason within "
                         "max_retries")


def add_cancel_and_ingest(sub: argparse._SubParsersAction) -> None:
    """``campaign cancel`` and ``campaign ingest``."""
    cc = command(sub, "cancel", help="cancel a campaign's unfinished points",
                 description="Cancel the jobs of unfinished points (scancel on SLURM, SIGINT locally).",
                 epilog="examples:\n  campaign cancel\n  campaign cancel 20261121-1057 --point 3 --point 4",
                 handler=cancel)
    cc.add_argument("campaign", nargs="?", help="campaign id, unique id prefix or name (default: the latest)")
    store_arg(cc)
    cc.add_argument("--point", action="append", type=INT64, help="only these point numbers (#, repeatable)")
    ig = command(sub, "ingest", help="fold results that jobs spooled to files into the store",
                 description="Replay the spool files of jobs that could not reach the store (exactly once).",
                 epilog="examples:\n  campaign ingest\n  campaign ingest --all --store sqlite:///results/campaign.db",
                 handler=ingest)
    ig.add_argument("campaign", nargs="?", help="campaign id, unique id prefix or name (default: the latest)")
    store_arg(ig)
    ig.add_argument("--all", action="store_true", help="every campaign in the store")


def status(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``campaign status``: the table once, live (--watch) or until every point is final (--wait)."""
    from campaign.observe.status import show_status, watch_status

    if args.watch:
        return watch_status(args.campaign, store_url=args.store, interval=args.interval)
    submit = None
    if args.submit:
        if not args.wait:
            raise CampaignError("--submit goes with --wait (it submits while waiting); campaign resume submits once")
        from campaign.launch.resume import due_lines, submit_due

        store_url = args.store
        submit = lambda cid: due_lines(submit_due(store_url, cid))  # noqa: E731 - it alone writes
    return show_status(args.campaign, store_url=args.store, as_json=args.json, wait=args.wait,
                       interval=args.interval, timeout=args.timeout, submit=submit)


def cancel(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``campaign cancel``."""
    from campaign.observe.cancel import cancel as cancel_points

    return cancel_points(args.campaign, store_url=args.store, points=args.point)


def ingest(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``campaign ingest``."""
    from campaign.observe.ingest import ingest as ingest_spool

    return ingest_spool(args.campaign, store_url=args.store, all_campaigns=args.all)
