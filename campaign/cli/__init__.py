"""The ``campaign`` command: a thin layer over the library.

Each subcommand parses its arguments (``build_parser``; each group's module adds its
own: launch, observe, harvest, tools, with campaign.cli.parser's helpers), calls one
library function that raises, and campaign.cli.exits maps what it raises to
``error: <one line>`` on stderr and the error's own exit status (campaign/common/errors.py).
Nothing else in campaign calls ``sys.exit``: ``python -m campaign`` and ``python -m
campaign.launch`` end through ``exits.exit_with``.

Exit status of the read commands (README, "Exit status"): ``status`` 0 (``--wait``: 1 when a point did not
complete, 124 when ``--timeout`` ran out first); ``harvest`` 0, 1 when nothing completed to
harvest; ``figures`` 0, 1 when nothing completed to draw from; ``plan`` 0, 1 when nothing completed or no choice fits; ``report`` 0; ``cancel`` 0; ``ingest`` 0, 1 when a malformed spool file was quarantined;
any of them 2 for bad input or a store it cannot use, 130 on Ctrl-C. A launch's, a submit's and a
resume's: campaign.cli.launch.
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from campaign.cli.exits import exit_with, guarded, std_streams
from campaign.cli.parser import Parser
from campaign.common.errors import EXIT_INCOMPLETE, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, CampaignError

__all__ = ["EXIT_INCOMPLETE", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE", "build_parser", "exit_with", "main"]

EPILOG_MAIN = """examples:
  campaign launch -m platform=local gpus=1,2                # launch a campaign (Hydra sweep)
  campaign status --wait                                    # follow the latest campaign
  campaign resume                                           # rerun what did not complete
  campaign harvest --to csv --out results/scaling.csv       # speedup and efficiency
"""


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``campaign`` and its subcommands, in the order ``campaign --help`` lists
    them: each group's module adds its own (``launch`` and ``resume`` are listed for the
    help and completion, and parse their own arguments: a launch's are Hydra's)."""
    from campaign import __version__
    from campaign.cli import figures, harvest, launch, observe, plan, report, tools

    top = Parser(prog="campaign", description="Scaling studies of deep-learning training on HPC clusters.",
                 epilog=EPILOG_MAIN, formatter_class=argparse.RawDescriptionHelpFormatter)
    top.add_argument("--version", action="version", version=f"campaign {__version__}")
    sub = top.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    launch.add_parsers(sub)
    tools.add_completion(sub)
    observe.add_status(sub)
    harvest.add_parsers(sub)
    figures.add_parsers(sub)
    plan.add_parsers(sub)
    report.add_parsers(sub)
    observe.add_cancel_and_ingest(sub)
    tools.add_trace(sub)
    tools.add_datagen(sub)
    return top


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run ``campaign`` with ``argv`` (default: this process's arguments); returns its exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    std_streams()  # a closed one becomes /dev/null (campaign.cli.exits)
    return guarded(lambda: _dispatch(argv))


def _dispatch(argv: list[str]) -> int:
    # launch and resume parse their own arguments (a launch's are Hydra's overrides)
    if argv[:1] == ["launch"]:
        from campaign.cli.launch import launch_main

        return launch_main(argv[1:], prog="campaign launch")
    if argv[:1] == ["resume"]:
        from campaign.cli.launch import resume_main

        return resume_main(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return EXIT_USAGE
    if "store" not in vars(args):  # reads files, or nothing
        return guarded(lambda: args.handler(args, parser))
    from campaign.store import default_store_url

    args.store = args.store or default_store_url()
    return guarded(lambda: _with_store(args, parser), store_url=args.store)


def _with_store(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from campaign.common.redact import ambiguous_password

    problem = ambiguous_password(args.store)
    if problem:  # never handed to the driver: it would look part of the password up
        raise CampaignError(problem)
    return args.handler(args, parser)
