"""The command lines that rerun a stored campaign's points: ``campaign resume`` (every point
that did not complete, campaign/launch/resume.py) and its older, narrower form
``campaign launch --retry CAMPAIGN``, kept as an alias: it resumes the points that never
reached their scheduler (``--state rejected,lost,waiting``) and says so.

Exit status as a launch's (README): 0 resubmitted (or nothing to resume), 2 refused
before anything changed, 3 some point refused by its scheduler (named, with the command
that tries again), 130 interrupted."""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from campaign.errors import EXIT_OK

RETRY_STATES = "rejected,lost,waiting"  # what `launch --retry` always meant: never reached the scheduler
EPILOG = """examples:
  campaign resume                                   # the latest campaign: every point that did not complete
  campaign resume 20261121-1057 --state failed,timeout
  campaign resume --dry-run                         # what would go, nothing submitted
  campaign resume platform.time_limit_min=240       # with a longer time limit, for these points only
  campaign resume trainer.params.fail_rank=null     # with a fix, for these points only

Exit status: 0 resubmitted (or nothing to resume), 2 refused (nothing changed),
3 some point refused by its scheduler, 130 interrupted."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's own usage errors: one line, exit 2 (as campaign's CLI)
        print(f"error: {message}; see {self.prog} --help", file=sys.stderr)
        sys.exit(2)


def build_parser(prog: str) -> argparse.ArgumentParser:
    p = _Parser(prog=prog, description="Rerun, as new attempts of the same points, every point of a campaign that "
                "did not complete (failed, timeout, cancelled, out of memory, node failure, preempted, lost, refused "
                "at submit, waiting for room); completed and running points are left alone.",
                epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("args", nargs="*", metavar="[CAMPAIGN] [KEY=VALUE ...]",
                   help="campaign id, unique id prefix or name (default: the latest), then overrides for the "
                        "resubmitted points")
    p.add_argument("--store", metavar="URL", default=None,
                   help="results store; default $CAMPAIGN_STORE or sqlite:///results/campaign.db")
    p.add_argument("--state", metavar="S[,S]", default=None,
                   help="only points in these states (e.g. failed,timeout)")
    p.add_argument("--dry-run", action="store_true", help="list what would be resubmitted; submit nothing")
    return p


def split_args(args: Sequence[str]) -> tuple[Optional[str], list[str]]:
    """[CAMPAIGN] [KEY=VALUE ...] -> (campaign or None, overrides)."""
    from campaign.errors import ConfigError

    refs = [a for a in args if "=" not in a]
    if len(refs) > 1:
        raise ConfigError(f"one campaign at a time, got {', '.join(refs)}; overrides are KEY=VALUE")
    if refs and args[0] != refs[0]:
        raise ConfigError(f"the campaign ({refs[0]}) comes before the overrides")
    return (refs[0] if refs else None), [a for a in args if "=" in a]


def resume_main(argv: Sequence[str], prog: str = "campaign resume", states: Optional[str] = None) -> int:
    """``campaign resume ...``: parse, resume, map errors to the launch's exit statuses."""
    from campaign.backends.entry import private_umask
    from campaign.errors import EXIT_INTERRUPTED, CampaignError
    from campaign.text import printable

    private_umask()
    try:
        args = build_parser(prog).parse_args(list(argv))
        from campaign.launch.resume import check_resubmitted, parse_states, resume
        from campaign.store import default_store_url

        ref, overrides = split_args(args.args)
        out = resume(ref, args.store or default_store_url(), states=parse_states(args.state or states),
                     dry_run=args.dry_run, overrides=overrides)
        check_resubmitted(out)
    except CampaignError as exc:
        print(f"error: {printable(exc)}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(("\n" if sys.stderr.isatty() else "") + "interrupted (Ctrl-C); whatever was submitted is recorded "
              "(campaign status shows it)", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    return EXIT_OK


def retry_main(argv: Sequence[str], prog: str) -> int:
    """``campaign launch --retry [CAMPAIGN] [--store URL]``: ``campaign resume --state
    rejected,lost,waiting``, with a note saying so."""
    print(f"note: {prog} is campaign resume --state {RETRY_STATES} (campaign resume reruns every point that "
          "did not complete)", file=sys.stderr)
    return resume_main(argv, prog="campaign resume", states=RETRY_STATES)
