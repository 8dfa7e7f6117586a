"""``campaign launch`` (and ``python -m campaign.launch``), ``campaign resume``, the
alias ``campaign launch --retry`` and ``campaign submit``: adapters over
``campaign.launch.main.launch``, ``campaign.launch.resume.resume`` and
``campaign.launch.submitplan.submit_plan``.

Exit status of a launch (README, "Exit codes"; campaign/common/errors.py): 0 submitted, 2 refused
before anything was stored, 3 stored but some point not submitted or failed, 130
interrupted. ``resume``: 0 resubmitted (or nothing to resume), 2 refused (nothing
changed), 3 some point refused by its scheduler, 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from campaign.cli.exits import guarded, std_streams
from campaign.cli.parser import Parser

PROG = "campaign launch"
RETRY_STATES = "rejected,lost,waiting"  # what `launch --retry` always meant: never reached the scheduler
LAUNCH_INTERRUPTED = "error: interrupted; nothing more was submitted"
RESUME_INTERRUPTED = "interrupted (Ctrl-C); whatever was submitted is recorded (campaign status shows it)"
RESUME_EPILOG = """examples:
  campaign resume                                   # the latest campaign: every point that did not complete
  campaign resume 20261121-1057 --state failed,timeout
  campaign resume --dry-run                         # what would go, nothing submitted
  campaign resume platform.time_limit_min=240       # with a longer time limit, for these points only
  campaign resume trainer.params.fail_rank=null     # with a fix, for these points only

Exit status: 0 resubmitted (or nothing to resume), 2 refused (nothing changed),
3 some point refused by its scheduler, 130 interrupted."""


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """``launch`` and ``resume`` in the command list (and completion); they parse their own arguments."""
    # `campaign launch ...` is handed to the Hydra app before argparse (its arguments are
    # Hydra's); this entry is for the command list and `campaign launch --help`.
    sub.add_parser("launch", help="launch a campaign: Hydra overrides, -m for a sweep (python -m campaign.launch)",
                   add_help=False)
    rs = sub.add_parser("resume", help="rerun, as new attempts, the points of a campaign that did not complete",
                        add_help=False)  # parsed by resume_parser (its exit statuses are a launch's)
    rs.add_argument("--store")
    rs.add_argument("--state")
    rs.add_argument("--dry-run", action="store_true")
    add_submit(sub)


SUBMIT_EPILOG = """examples:
  campaign launch -m platform=v100 gpus=1,2,4 --dry-run --save-plan plan.json   # review plan.json
  campaign submit plan.json                          # submit exactly what was reviewed
  campaign submit plan.json --store postgresql://db.example/campaigns

Exit status (a launch's): 0 submitted, 2 refused (nothing stored: not a plan, not signed by
you, changed since it was saved, another code version or catalogue, a cluster that can no
longer hold it), 3 stored but some point not submitted, 130 interrupted."""


def add_submit(sub: argparse._SubParsersAction) -> None:
    """``campaign submit FILE``: a saved plan (campaign/launch/savedplan.py) submitted as it is."""
    from campaign.cli.parser import command

    p = command(sub, "submit", help="submit exactly a plan saved by campaign launch ... --dry-run --save-plan FILE",
                description="Register and submit exactly the points of a plan saved by a dry run (campaign launch "
                            "... --dry-run --save-plan FILE): nothing is composed again. A plan not signed by you, "
                            "changed since it was saved, made by another code version or from other configs, or "
                            "that the cluster can no longer hold is refused in one line, nothing stored.",
                epilog=SUBMIT_EPILOG, handler=submit)
    p.add_argument("file", metavar="FILE", help="the plan (JSON) that --save-plan wrote")
    # not `store`: campaign's default store is not this command's; the plan names its own
    p.add_argument("--store", dest="plan_store", metavar="URL", default=None,
                   help="register the campaign in this store instead of the plan's own")


def submit(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``campaign submit FILE [--store URL]``: submit the plan, then its launch's exit status."""
    from campaign.backends.entry import private_umask
    from campaign.launch.run import check_outcome
    from campaign.launch.submitplan import submit_plan

    private_umask()
    check_outcome(submit_plan(args.file, args.plan_store))
    return 0


def launch_main(argv: Optional[Sequence[str]] = None, prog: str = PROG) -> int:
    """Run a launch with ``argv`` (default: this process's arguments); returns its exit status."""
    from campaign.backends.entry import private_umask

    argv = list(sys.argv[1:] if argv is None else argv)
    std_streams()  # a closed one becomes /dev/null (campaign.cli.exits)
    private_umask()  # the store, results, logs and job folders made from here on are the user's alone
    if argv[:1] == ["--retry"]:
        return retry_main(argv[1:], prog=f"{prog} --retry")

    def run() -> None:
        from campaign.launch.main import launch

        launch(argv, prog)

    return guarded(run, interrupted_message=LAUNCH_INTERRUPTED)


def resume_parser(prog: str) -> argparse.ArgumentParser:
    """``campaign resume``'s own parser (its --help)."""
    p = Parser(prog=prog, description="Rerun, as new attempts of the same points, every point of a campaign that "
               "did not complete (failed, timeout, cancelled, out of memory, node failure, preempted, lost, refused "
               "at submit, waiting for room); completed and running points are left alone.",
               epilog=RESUME_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
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
    from campaign.common.errors import ConfigError

    refs = [a for a in args if "=" not in a]
    if len(refs) > 1:
        raise ConfigError(f"one campaign at a time, got {', '.join(refs)}; overrides are KEY=VALUE")
    if refs and args[0] != refs[0]:
        raise ConfigError(f"the campaign ({refs[0]}) comes before the overrides")
    return (refs[0] if refs else None), [a for a in args if "=" in a]


def resume_main(argv: Sequence[str], prog: str = "campaign resume", states: Optional[str] = None) -> int:
    """``campaign resume ...``: parse, resume, report; returns the exit status."""
    from campaign.backends.entry import private_umask

    private_umask()

    def run() -> None:
        args = resume_parser(prog).parse_intermixed_args(list(argv))  # overrides after an option too
        from campaign.launch.resume import check_resubmitted, parse_states, resume
        from campaign.store import default_store_url

        ref, overrides = split_args(args.args)
        out = resume(ref, args.store or default_store_url(), states=parse_states(args.state or states),
                     dry_run=args.dry_run, overrides=overrides)
        check_resubmitted(out)

    # its messages quote the overrides as typed (KEY=VALUE), which redaction would take for a secret
    return guarded(run, interrupted_message=RESUME_INTERRUPTED, redact=False)


def retry_main(argv: Sequence[str], prog: str) -> int:
    """``campaign launch --retry [CAMPAIGN] [--store URL]``: ``campaign resume --state
    rejected,lost,waiting``, with a note saying so."""
    print(f"note: {prog} is campaign resume --state {RETRY_STATES} (campaign resume reruns every point that "
          "did not complete)", file=sys.stderr)
    return resume_main(argv, prog="campaign resume", states=RETRY_STATES)
