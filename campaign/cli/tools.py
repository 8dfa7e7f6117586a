"""``campaign completion`` (a shell completion script from this parser) and ``campaign
trace`` (profiler traces read from files, no store): adapters over campaign.cli.completion
and campaign.observe.trace_report."""

from __future__ import annotations

import argparse

from campaign.cli.parser import command
from campaign.common.errors import EXIT_OK


def add_completion(sub: argparse._SubParsersAction) -> None:
    """``campaign completion bash|zsh``."""
    cp = command(sub, "completion", help="print a shell completion script (bash or zsh)",
                 description="Print the completion script of campaign for a shell.",
                 epilog='examples:\n  eval "$(campaign completion bash)"     # in ~/.bashrc\n'
                        '  eval "$(campaign completion zsh)"      # in ~/.zshrc, after compinit',
                 handler=completion)
    cp.add_argument("shell", choices=("bash", "zsh"), help="bash or zsh")


def add_trace(sub: argparse._SubParsersAction) -> None:
    """``campaign trace FILE...``."""
    tr = command(sub, "trace", help="GPU/CPU utilisation, communication and top kernels of profiler traces",
                 description="Read PyTorch profiler chrome traces (a job's <job>_<rank>_trace.json.gz or your "
                             "own export_chrome_trace files, .json or .json.gz): per rank and device the "
                             "window, GPU busy time (union of kernel, memcpy and memset intervals) and "
                             "utilisation, CPU operator time, communication, top kernels and operators.",
                 epilog="examples:\n  campaign trace results/jobs/*/123_0_trace.json.gz\n"
                        "  campaign trace my_run.json --top 10\n  campaign trace a.json.gz b.json.gz --json",
                 handler=trace)
    tr.add_argument("files", nargs="+", metavar="FILE",
                    help="chrome trace files (.json or .json.gz), or folders of them (each file in it)")
    tr.add_argument("--json", action="store_true", help="machine-readable output (every figure)")
    tr.add_argument("--top", type=int, default=5, help="kernels and operators listed per file (default 5)")


def completion(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Print the completion script for ``args.shell``."""
    from campaign.cli.completion import completion_script

    print(completion_script(args.shell, parser), end="")
    return EXIT_OK


def trace(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Summarise the profiler traces ``args.files``."""
    from campaign.observe.trace_report import show_traces

    return show_traces(args.files, as_json=args.json, top=args.top)
