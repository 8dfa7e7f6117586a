"""The ``campaign`` command: a thin layer over the library.

Each subcommand parses its arguments, calls one function, and maps
``CampaignError`` to ``error: <one line>`` on stderr with exit status 2.

Exit status of the read commands (README, "Exit status"): ``status`` 0 (``--wait``:
1 when a point did not complete, 124 when ``--timeout`` ran out first); ``harvest`` 0, 1 when nothing completed to
harvest; ``cancel`` 0; ``ingest`` 0, 1 when a malformed spool file was quarantined;
any of them 2 for bad input or a store it cannot use, 130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn, Optional, Sequence

from campaign.errors import EXIT_INCOMPLETE, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, CampaignError

__all__ = ["EXIT_INCOMPLETE", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE", "build_parser", "main"]

EPILOG_MAIN = """examples:
  campaign launch -m platform=local gpus=1,2                # launch a campaign (Hydra sweep)
  campaign status --wait                                    # follow the latest campaign
  campaign resume                                           # rerun what did not complete
  campaign harvest --to csv --out results/scaling.csv       # speedup and efficiency
"""


EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command Ctrl-C ended


def fail(exc: BaseException) -> NoReturn:
    """Print ``error: <message>`` (secrets redacted, control characters escaped) and exit 2
    (bad input or a refused action)."""
    from campaign.text import shown

    print(f"error: {shown(exc)}", file=sys.stderr)
    sys.exit(EXIT_USAGE)


def interrupted() -> int:
    """Ctrl-C: one line, exit status 130; nothing half-written (stores change in transactions)."""
    try:
        # a live progress line (status --wait on a terminal) is ended first
        print(("\n" if sys.stderr.isatty() else "") + "interrupted (Ctrl-C)", file=sys.stderr, flush=True)
    except (BrokenPipeError, OSError):
        pass
    return EXIT_INTERRUPTED


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse's own usage errors: one line, exit 2
        print(f"error: {message}; see {self.prog} --help", file=sys.stderr)
        sys.exit(EXIT_USAGE)


def _store_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", metavar="URL", default=None,
                   help="results store (SQLAlchemy URL); default $CAMPAIGN_STORE or sqlite:///results/campaign.db")


def build_parser() -> argparse.ArgumentParser:
    from campaign import __version__

    top = _Parser(prog="campaign", description="Scaling studies of deep-learning training on HPC clusters.",
                  epilog=EPILOG_MAIN, formatter_class=argparse.RawDescriptionHelpFormatter)
    top.add_argument("--version", action="version", version=f"campaign {__version__}")
    sub = top.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    # `campaign launch ...` is handed to the Hydra app before argparse (its arguments are
    # Hydra's); this entry is for the command list and `campaign launch --help`.
    sub.add_parser("launch", help="launch a campaign: Hydra overrides, -m for a sweep (python -m campaign.launch)",
                   add_help=False)
    rs = sub.add_parser("resume", help="rerun, as new attempts, the points of a campaign that did not complete",
                        add_help=False)  # parsed by campaign.launch.retry (its exit statuses are a launch's)
    rs.add_argument("--store")
    rs.add_argument("--state")
    rs.add_argument("--dry-run", action="store_true")
    cp = sub.add_parser("completion", help="print a shell completion script (bash or zsh)",
                        description="Print the completion script of campaign for a shell.",
                        epilog='examples:\n  eval "$(campaign completion bash)"     # in ~/.bashrc\n'
                               '  eval "$(campaign completion zsh)"      # in ~/.zshrc, after compinit',
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    cp.add_argument("shell", choices=("bash", "zsh"), help="bash or zsh")

    st = sub.add_parser("status", help="what ran, what pends, what failed and why",
                        description="One row per point of a campaign (the latest by default): its state, "
                                    "progress (iteration i/n, iterations/s, time left) and the values that differ "
                                    "between the points; then the campaign's progress bar and ETA.",
                        epilog="examples:\n  campaign status\n  campaign status main-job --wait\n"
                               "  campaign status 20261121-1057 --wait --timeout 600   # exit 124 if still running then\n"
                               "  campaign status --watch\n  campaign status --json | jq .progress",
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    st.add_argument("campaign", nargs="?", help="campaign id, unique id prefix or name (a name several campaigns "
                                               "share: the latest of them; default: the latest campaign)")
    _store_arg(st)
    st.add_argument("--json", action="store_true", help="machine-readable output")
    st.add_argument("--wait", action="store_true", help="block until every point is final, then one summary line; "
                                                        "exit 1 if any did not complete")
    st.add_argument("--watch", action="store_true", help="redraw the table live until every point is final (Ctrl-C stops)")
    st.add_argument("--interval", type=float, default=2.0, help="seconds between refreshes with --wait/--watch (default 2)")
    st.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                    help="with --wait: give up after this many seconds (exit 124, with a summary and the ETA)")
    st.add_argument("--submit", action="store_true",
                    help="with --wait: also submit what the campaign has due (writes the store): the next wave of "
                         "waiting points as room frees, and points that failed for a retry_on reason within "
                         "max_retries")

    hv = sub.add_parser("harvest", help="speedup, parallel efficiency, throughput tables and exports",
                        description="Derive T1/TN speedup and speedup/N efficiency from completed points.",
                        epilog="examples:\n  campaign harvest\n  campaign harvest --to csv --out results/scaling.csv\n"
                               "  campaign harvest 20261121-1057 --to markdown --platform v100 --platform a100\n"
                               "  campaign harvest --table all --to parquet --out results/tables/\n"
                               "  campaign harvest --compare reference --where gpus=2,4\n"
                               "  campaign harvest --where image=3f2a9c1b7d4e    # points run in this container image\n"
                               "  campaign harvest --plots results/figures\n"
                               "  campaign harvest --table attempts            # every run of every point, failed ones too",
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    hv.add_argument("campaign", nargs="?", help="campaign id, unique id prefix or name (a name several campaigns "
                                               "share: the latest of them; default: the latest campaign)")
    _store_arg(hv)
    hv.add_argument("--to", dest="fmt", default="table", help="table (default), csv, json, markdown or parquet")
    hv.add_argument("--out", default=None, help="write to this file instead of standard output")
    for key in ("platform", "trainer", "experiment"):
        hv.add_argument(f"--{key}", action="append", help=f"only these {key}s (repeatable)")
    hv.add_argument("--gpus", action="append", type=int, help="only these GPU counts (repeatable)")
    hv.add_argument("--where", action="append", metavar="KEY=V[,V]",
                    help="only points with these values (platform, trainer, experiment, gpus, nodes, dataset; image: a "
                         "sha256 prefix, an image path or none; repeatable)")
    from campaign.harvest.tables import TABLE_CHOICES, table_help

    hv.add_argument("--table", default="scaling", choices=TABLE_CHOICES, help=table_help())
    hv.add_argument("--compare", metavar="reference|ideal|CAMPAIGN", default=None,
                    help="put the reference study's figures, the ideal line or another campaign beside the measured values")
    hv.add_argument("--plots", metavar="DIR", default=None, help="also write the figures (PNG and SVG) to DIR")

    cc = sub.add_parser("cancel", help="cancel a campaign's unfinished points",
                        description="Cancel the jobs of unfinished points (scancel on SLURM, SIGINT locally).",
                        epilog="examples:\n  campaign cancel\n  campaign cancel 20261121-1057 --point 3 --point 4",
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    cc.add_argument("campaign", nargs="?", help="campaign id, unique id prefix or name (default: the latest)")
    _store_arg(cc)
    cc.add_argument("--point", action="append", type=int, help="only these point numbers (#, repeatable)")
    ig = sub.add_parser("ingest", help="fold results that jobs spooled to files into the store",
                        description="Replay the spool files of jobs that could not reach the store (exactly once).",
                        epilog="examples:\n  campaign ingest\n  campaign ingest --all --store sqlite:///results/campaign.db",
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    ig.add_argument("campaign", nargs="?", help="campaign id, unique id prefix or name (default: the latest)")
    _store_arg(ig)
    ig.add_argument("--all", action="store_true", help="every campaign in the store")
    tr = sub.add_parser("trace", help="GPU/CPU utilisation, communication and top kernels of profiler traces",
                        description="Read PyTorch profiler chrome traces (a job's <job>_<rank>_trace.json.gz or your "
                                    "own export_chrome_trace files, .json or .json.gz): per rank and device the "
                                    "window, GPU busy time (union of kernel, memcpy and memset intervals) and "
                                    "utilisation, CPU operator time, communication, top kernels and operators.",
                        epilog="examples:\n  campaign trace results/jobs/*/123_0_trace.json.gz\n"
                               "  campaign trace my_run.json --top 10\n  campaign trace a.json.gz b.json.gz --json",
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    tr.add_argument("files", nargs="+", metavar="FILE", help="chrome trace files (.json or .json.gz)")
    tr.add_argument("--json", action="store_true", help="machine-readable output (every figure)")
    tr.add_argument("--top", type=int, default=5, help="kernels and operators listed per file (default 5)")
    return top


def main(argv: Optional[Sequence[str]] = None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:
        return interrupted()
    except BrokenPipeError:
        quiet_broken_pipe()
        return 0


def _main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["launch"]:
        from campaign.launch.main import main as launch

        return launch(argv[1:], prog="campaign launch")
    if argv[:1] == ["resume"]:
        from campaign.launch.retry import resume_main

        return resume_main(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return EXIT_USAGE
    if args.command == "trace":  # reads files, no store
        from campaign.trace_report import show_traces

        try:
            return show_traces(args.files, as_json=args.json, top=args.top)
        except CampaignError as exc:
            fail(exc)
    if args.command == "completion":
        from campaign.completion import completion_script

        print(completion_script(args.shell, parser), end="")
        return EXIT_OK
    from campaign.store import default_store_url

    store_url = args.store or default_store_url()
    from campaign.redact import ambiguous_password

    if ambiguous_password(store_url):  # never handed to the driver: it would look part of the password up
        fail(ambiguous_password(store_url))
    try:
        if args.command == "status":
            from campaign.status import show_status, watch_status

            if args.watch:
                return watch_status(args.campaign, store_url=store_url, interval=args.interval)
            submit = None
            if args.submit:
                if not args.wait:
                    raise CampaignError("--submit goes with --wait (it submits while waiting); "
                                        "campaign resume submits once")
                from campaign.launch.resume import due_lines, submit_due

                submit = lambda cid: due_lines(submit_due(store_url, cid))  # noqa: E731 - it alone writes
            return show_status(args.campaign, store_url=store_url, as_json=args.json, wait=args.wait,
                               interval=args.interval, timeout=args.timeout, submit=submit)
        if args.command == "harvest":
            from campaign.harvest.run import harvest

            where = {k: v for k in ("platform", "trainer", "experiment", "gpus") if (v := getattr(args, k))}
            return harvest(args.campaign, store_url=store_url, fmt=args.fmt, out=args.out, where=where,
                           where_items=args.where, table=args.table, compare=args.compare, plots=args.plots)
        if args.command == "ingest":
            from campaign.ingest import ingest

            return ingest(args.campaign, store_url=store_url, all_campaigns=args.all)
        if args.command == "cancel":
            from campaign.cancel import cancel

            return cancel(args.campaign, store_url=store_url, points=args.point)
    except CampaignError as exc:
        fail(exc)
    except OSError as exc:  # a folder or file the command cannot use (read-only, missing, full)
        fail(_os_message(exc))
    except Exception as exc:
        if not type(exc).__module__.startswith("sqlalchemy"):  # a bug: its traceback is what to report
            raise
        # a database error no store function translated (sqlalchemy is not imported
        # at start-up for `except` to name it: --help stays fast)
        from campaign.errors import one_line
        from campaign.store import describe_url

        fail(f"results store {describe_url(store_url)}: {one_line(getattr(exc, 'orig', None) or exc)}")
    return 0


def _os_message(exc: OSError) -> str:
    where = f"{exc.filename}: " if exc.filename else ""
    return f"{where}{exc.strerror or exc}"


def quiet_broken_pipe() -> None:
    """`campaign ... | head` closes our stdout early: end quietly, as Unix tools do."""
    import os

    try:
        sys.stdout.flush()
    except BrokenPipeError:
        pass
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


if __name__ == "__main__":
    sys.exit(main())
