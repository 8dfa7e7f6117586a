"""``campaign completion`` (a shell completion script from this parser), ``campaign
trace`` (profiler traces read from files, no store) and ``campaign datagen`` (a dataset's
stand-in in its real on-disk format): adapters over campaign.cli.completion,
campaign.observe.trace_report and campaign_datasets.standin."""

from __future__ import annotations

import argparse

from campaign.cli.parser import command
from campaign.common.errors import EXIT_OK


def add_completion(sub: argparse._SubParsersAction) -> None:
    """``campaign completion bash|zsh``."""
    cp = command(sub, "completion", help="print a shell completion script (bash or zsh)",
                 description="Print the completion script of campaign for a shell. (campaigns: the latest "
                             "campaigns' names and ids in the default store, one a line, for the script itself.)",
                 epilog='examples:\n  eval "$(campaign completion bash)"     # in ~/.bashrc\n'
                        '  eval "$(campaign completion zsh)"      # in ~/.zshrc, after compinit',
                 handler=completion)
    cp.add_argument("shell", choices=("bash", "zsh", "campaigns"), help="bash or zsh (campaigns: what the script "
                                                                      "completes a campaign with)")


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
    """Print the completion script for ``args.shell`` (``campaigns``: the words it completes a campaign with)."""
    from campaign.cli.completion import campaign_words, completion_script

    if args.shell == "campaigns":
        from campaign.store import default_store_url

        words = campaign_words(default_store_url())
        print("\n".join(words), end="\n" if words else "")
        return EXIT_OK
    print(completion_script(args.shell, parser), end="")
    return EXIT_OK


def trace(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Summarise the profiler traces ``args.files``."""
    from campaign.observe.trace_report import show_traces

    return show_traces(args.files, as_json=args.json, top=args.top)


def add_datagen(sub: argparse._SubParsersAction) -> None:
    """``campaign datagen DATASET --out DIR [--size S]``."""
    from campaign_datasets.standin_sizes import STANDINS, SIZES

    sizes = ", ".join(f"{name} {'/'.join(f'{t:,}+{v:,}' for t, v in SIZES[name].values())}" for name in STANDINS)
    dg = command(sub, "datagen", help="write a stand-in of a study's dataset in its real on-disk format",
                 description="Write made-up images in the exact on-disk format of a study's dataset (ADE20K's "
                             "ADEChallengeData2016 JPEG/PNG tree, MNIST's idx files, CIFAR's pickled batches), "
                             "so that the real loaders read files where the dataset cannot be downloaded; "
                             "then launch with dataset.root=DIR. Sizes tests/small/full hold "
                             f"(training+test images): {sizes}. A STANDIN.txt in the dataset's folder says "
                             "what wrote it.",
                 epilog="examples:\n  campaign datagen ade20k --out data/ade20k --size small\n"
                        "  campaign launch -m trainer=swinv2_upernet dataset=ade20k dataset.root=data/ade20k\n"
                        "  campaign datagen mnist --out data/mnist --size full",
                 handler=datagen)
    dg.add_argument("dataset", choices=STANDINS, help="the dataset whose format is written")
    dg.add_argument("--out", required=True, metavar="DIR", help="the folder to write (dataset.root then names it)")
    dg.add_argument("--size", default="small", choices=("tests", "small", "full"), help="how many images (default small)")
    dg.add_argument("--seed", type=int, default=0, help="the pixels' seed (default 0)")


def datagen(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Write the stand-in ``args.dataset`` under ``args.out``; refuses a folder that holds it already."""
    import os

    from campaign.common.errors import ConfigError
    from campaign_datasets.standin import StandinError, has_files, write_standin
    from campaign_door import Refused

    if has_files(args.dataset, args.out):
        raise ConfigError(f"{args.out} holds {args.dataset} already; nothing was written "
                          f"(remove it first, or choose another --out)")
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        raise ConfigError(f"--out {args.out} is a file, not a folder; choose another --out")
    try:
        folder = write_standin(args.dataset, args.out, args.size, args.seed)
    except (StandinError, Refused) as exc:  # Refused: a folder or file the door will not write (a link, another's)
        raise ConfigError(str(exc)) from None
    except OSError as exc:
        raise ConfigError(f"--out {args.out}: {exc.strerror or exc}; choose another --out") from None
    print(f"wrote a {args.size} stand-in of {args.dataset} at {folder}; launch with dataset.root={args.out}")
    return EXIT_OK
