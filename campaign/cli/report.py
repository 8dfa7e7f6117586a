"""``campaign report``: an adapter over campaign.report.page.write_report.

Exit status: 0 (the page written, whatever state the campaign's points are in), 2 for
bad input (an unknown campaign, an --out it cannot write) or a store it cannot use.
"""

from __future__ import annotations

import argparse

from campaign.cli.parser import CAMPAIGNS_HELP, command, store_arg

EPILOG = """examples:
  campaign report --out report.html                   # the latest campaign
  campaign report main-job --out results/main-job.html
  campaign report vit-nodes-1 vit-nodes-2 --out nodes.html     # several campaigns read as one page
  campaign report vit-nodes --out nodes.html                   # every campaign of that name, as one
  campaign report vit-twin --out vit.html          # a study's campaign: its figures by the study's numbers too
  campaign report 20261121-1057 --compare 20261120-0930 --out cmp.html   # compared with another campaign"""


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """``campaign report``."""
    p = command(sub, "report", help="one self-contained HTML page of a campaign (tables, figures, failures)",
                description="Write a campaign's report: summary, the study's own tables and figures (a study "
                            "preset's campaign: under the study's numbers, as campaign figures makes them), scaling, "
                            "where the time goes, comparison with the reference study and other campaigns, failures "
                            "and attempts, provenance. Several campaigns (a name several share: all of them) are read "
                            "as one page. One HTML file, figures inline, nothing fetched: it opens offline.",
                epilog=EPILOG, handler=report)
    p.add_argument("campaign", nargs="*", metavar="CAMPAIGN",
                   help=CAMPAIGNS_HELP)
    store_arg(p)
    p.add_argument("--out", metavar="FILE", default=None, help="write the page to FILE instead of standard output")
    p.add_argument("--compare", metavar="CAMPAIGN", action="append", default=[],
                   help="put another campaign's scaling beside this one's (repeatable; as harvest --compare CAMPAIGN)")


def report(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``campaign report``."""
    from campaign.report.page import write_report

    return write_report(args.store, args.campaign, None if args.out == "-" else args.out,  # -: standard output
                        compare=args.compare)
