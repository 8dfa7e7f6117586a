"""``campaign plan``: an adapter over campaign.harvest.plan.plan (a read command: it never
writes the store).

Exit status: 0, 1 when nothing completed to plan from or no choice fits the deadline or
budget, 2 for bad input or a store it cannot use.
"""

from __future__ import annotations

import argparse

from campaign.cli.parser import CAMPAIGN_HELP, command, store_arg

EPILOG = """examples:
  campaign plan                                  # every platform and GPU count, measured or predicted
  campaign plan --budget 500                     # the fastest full run within 500 GPU-hours
  campaign plan 20261121-1057 --hours 24         # the cheapest full run that ends within a day
  campaign plan --hours 24 --budget 500 --launch # and the campaign launch line of each (printed, not run)"""


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """``campaign plan``."""
    p = command(sub, "plan", help="time and GPU-hours of the full schedule per platform and N, from the fitted model",
                description="Project the full training's time to solution and GPU-hours per platform and GPU count "
                            "(measured, or predicted by harvest's fitted model), and pick the fastest within a "
                            "budget and the cheapest within a deadline.",
                epilog=EPILOG, handler=plan)
    p.add_argument("campaign", nargs="?", help=CAMPAIGN_HELP)
    store_arg(p)
    p.add_argument("--hours", type=float, default=None, metavar="H",
                   help="deadline: the cheapest choice whose full schedule ends within H hours")
    p.add_argument("--budget", type=float, default=None, metavar="GPU_HOURS",
                   help="budget: the fastest choice whose full schedule costs at most GPU_HOURS")
    p.add_argument("--launch", action="store_true",
                   help="print the campaign launch line of each choice (never submits)")
    p.add_argument("--efficiency-floor", type=float, default=0.8, metavar="E",
                   help="the knee: the largest N whose efficiency stays at or above E (default 0.8)")


def plan(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``campaign plan``."""
    from campaign.harvest.plan import plan as plan_campaign

    return plan_campaign(args.campaign, store_url=args.store, hours=args.hours, budget=args.budget,
                         launch=args.launch, efficiency_floor=args.efficiency_floor)
