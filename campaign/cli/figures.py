"""``campaign figures``: an adapter over campaign.harvest.declared_run.figures.

Exit status: 0, 1 when the campaigns have no completed point to draw from, 2 for bad input
(an unknown campaign, campaigns of two studies, an --out that is a file) or a store it
cannot use.
"""

from __future__ import annotations

import argparse

from campaign.cli.parser import command, store_arg

EPILOG = """examples:
  campaign figures vit-twin --out results/figures/vit-twin        # every table and figure of the ViT study
  campaign figures dp-study                                        # list them (made, or why not); write nothing
  campaign figures dp-twin --out results/figures/dp --formats png  # PNG only (none: the CSVs and captions only)
  campaign figures vit-nodes-1 vit-nodes-2 --out results/figures/nodes   # several campaigns, one set
  campaign figures vit-nodes --out results/figures/nodes           # every campaign of that name"""


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """``campaign figures``."""
    p = command(sub, "figures", help="every table and figure of a study, by its own numbers (fig04.png, tab03.csv)",
                description="Draw every table and figure a study publishes (declared in conf/study/figures/) from "
                            "its campaigns, under the study's numbering, each with its CSV and caption, and an "
                            "index.json saying of each whether it was made and why not. A campaign of no study "
                            "gets harvest's usual figures.",
                epilog=EPILOG, handler=figures)
    p.add_argument("campaign", nargs="*", metavar="CAMPAIGN",
                   help="campaign ids, id prefixes or names (a name several campaigns share: all of them; "
                        "default: the latest campaign)")
    store_arg(p)
    p.add_argument("--out", metavar="DIR", default=None,
                   help="write the figures, their CSVs and captions and index.json to DIR (created when missing); "
                        "without it, list what would be made")
    p.add_argument("--formats", metavar="png,svg|none", default=None,
                   help="the figures' image files (default png,svg); none: only each item's CSV and caption")


def figures(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``campaign figures``."""
    from campaign.harvest.declared_run import figures as draw

    return draw(args.campaign, store_url=args.store, out=args.out, formats=args.formats)
