"""The parser helpers every command uses: one argparse class (usage errors as one line,
exit 2), ``--store``, and ``command`` (a subcommand with its examples and the function
that runs it: ``handler(args, parser) -> exit status``)."""

from __future__ import annotations

import argparse
from typing import NoReturn

from campaign.common.errors import EXIT_USAGE

# what `campaign status|harvest|...` take as their first argument
CAMPAIGN_HELP = ("campaign id, unique id prefix or name (a name several campaigns share: the latest of them; "
                 "default: the latest campaign)")


class Parser(argparse.ArgumentParser):
    """argparse with its own usage errors as one line and exit status 2."""

    def error(self, message: str) -> NoReturn:
        # argparse's exit prints to stderr and ends the process (campaign calls no sys.exit here)
        self.exit(EXIT_USAGE, f"error: {message}; see {self.prog} --help\n")


def store_arg(p: argparse.ArgumentParser) -> None:
    """``--store URL``: the results store a command reads or writes."""
    p.add_argument("--store", metavar="URL", default=None,
                   help="results store (SQLAlchemy URL); default $CAMPAIGN_STORE or sqlite:///results/campaign.db")


def command(sub: argparse._SubParsersAction, name: str, *, help: str, description: str, epilog: str,
            handler) -> argparse.ArgumentParser:
    """A subcommand with its description, examples (every command's --help has them) and handler."""
    p = sub.add_parser(name, help=help, description=description, epilog=epilog,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.set_defaults(handler=handler)
    return p
