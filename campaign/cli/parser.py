"""The parser helpers every command uses: one argparse class (usage errors as one line,
exit 2), ``--store``, and ``command`` (a subcommand with its examples and the function
that runs it: ``handler(args, parser) -> exit status``)."""

from __future__ import annotations

import argparse
from typing import NoReturn

from campaign.common.errors import EXIT_USAGE, ConfigError

# what `campaign status|harvest|...` take as their first argument
CAMPAIGN_HELP = ("campaign id, unique id prefix or name (a name several campaigns share: the latest of them; "
                 "default: the latest campaign)")

# harvest, figures and report: several campaigns read as one (campaign.harvest.several)
CAMPAIGNS_HELP = ("campaign ids, unique id prefixes or names, read as one (a name several campaigns share: all of "
                  "them; where two campaigns' points are alike, the newer attempt wins, said in a note; default: "
                  "the latest campaign)")


class Parser(argparse.ArgumentParser):
    """argparse with its own usage errors as one line and exit status 2."""

    def error(self, message: str) -> NoReturn:
        # argparse's exit prints to stderr and ends the process (campaign calls no sys.exit here)
        self.exit(EXIT_USAGE, f"error: {message}; see {self.prog} --help\n")


def _argparse_type(check, name: str):
    """An argparse ``type=`` from a campaign.common.numbers check: its one-line refusal
    becomes argparse's (``error: argument --interval: ...``, exit 2)."""

    def convert(text: str):
        try:
            return check(text)
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = name  # argparse names the type in its own messages
    return convert


def _int64(text: str) -> int:
    from campaign.common.numbers import parse_int64

    return parse_int64(text, "value")


def _positive_int64(text: str) -> int:
    from campaign.common.numbers import parse_int64

    value = parse_int64(text, "value")
    if value < 1:
        raise ConfigError(f"must be a positive integer, got {value}")
    return value


def _seconds(text: str) -> float:
    from campaign.common.numbers import positive_seconds

    return positive_seconds(text, "value")


INTERVAL_S = (0.1, 86400.0)  # a refresh: not a busy loop, and within what time.sleep can wait


def _interval(text: str) -> float:
    value = _seconds(text)
    lo, hi = INTERVAL_S
    if not lo <= value <= hi:
        raise ConfigError(f"give seconds from {lo:g} to {hi:g} (a day), got {text}")
    return value


# shared ``type=`` of every numeric option: integers within 64 bits, positive seconds
INT64 = _argparse_type(_int64, "integer")
POSITIVE_INT64 = _argparse_type(_positive_int64, "positive integer")
SECONDS = _argparse_type(_seconds, "seconds")
INTERVAL = _argparse_type(_interval, "seconds")


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
