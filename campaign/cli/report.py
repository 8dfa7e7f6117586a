"""``campaign report``: an adapter over campaign.report.page.write_report.

Exit status: 0 (the page written, whatever state the campaign's points are in), 2 for
bad input (an unknown campaign, an --out it cannot write) or a store it cannot use.
"""

from __future__ import annotations

import argparse

from campaign.cli.parser import CAMPAIGN_HELP, command, store_arg

EPILOG = """examples:
  campaign report --out report.html                   # the latest campaign
  campaign report main-job --out results/main-job.html
  campaign report 20261121-1057 20261120-0930 --out cmp.html   # the first, compared with the second"""


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """``campaign report``."""
    p = command(sub, "report", help="one self-contained HTML page of a campaign (tables, figures, failures)",
                description="Write a campaign's report: summary, scaling, where the time goes, comparison with the "
                            "reference study and other campaigns, failures and attempts, provenance. One HTML file, "
                            "figures inline, nothing fetched: it opens offline.",
                epilog=EPILOG, handler=report)
    p.add_argument("campaign", nargs="*", metavar="CAMPAIGN",
                   help=CAMPAIGN_HELP + "; more than one: the first, compared with the others")
    store_arg(p)
    p.add_argument("--out", metavar="FILE", default=None, help="write the page to FILE instead of standard output")


def report(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``campaign report``."""
    from campaign.report.page import write_report

    return write_report(args.store, args.campaign, None if args.out == "-" else args.out)  # -: standard output
