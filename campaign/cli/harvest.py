"""``campaign harvest``: an adapter over campaign.harvest.run.harvest. Its ``--to`` and
``--table`` read their registries (campaign.harvest.export.FORMATS,
campaign.harvest.tables.TABLES); the library refuses an unknown format, naming the
registered ones.

Exit status: 0, 1 when nothing completed to harvest, 2 for bad input or a store it
cannot use.
"""

from __future__ import annotations

import argparse

from campaign.cli.parser import CAMPAIGNS_HELP, INT64, command, store_arg

EPILOG = """examples:
  campaign harvest
  campaign harvest --to csv --out results/scaling.csv
  campaign harvest --to csv --raw --out results/scaling.csv   # text cells as stored (no ' before =, +, -, @)
  campaign harvest 20261121-1057 --to markdown --platform v100 --platform a100
  campaign harvest vit-nodes-1 vit-nodes-2 --to csv    # several campaigns as one table (a sweep launched in parts)
  campaign harvest vit-nodes                           # every campaign of that name, as one
  campaign harvest --table all --to parquet --out results/tables/
  campaign harvest --compare reference --where gpus=2,4
  campaign harvest --where image=3f2a9c1b7d4e    # points run in this container image
  campaign harvest --where trainer.params.backbone=resnet18 --where gpus=4   # one factor's points of a study
  campaign harvest --plots results/figures
  campaign harvest --plots results/figures --x experiment.global_batch   # figures against batch size
  campaign harvest --table attempts            # every run of every point, failed ones too
  campaign harvest --table model --efficiency-floor 0.7 --plots results/figures   # fitted t(N), knee at 70 %"""
FILTERS = ("platform", "trainer", "experiment", "gpus")  # --KEY V (repeatable): only these values


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """``campaign harvest``."""
    from campaign.harvest.export import format_help
    from campaign.harvest.tables import TABLE_CHOICES, table_help

    hv = command(sub, "harvest", help="speedup, parallel efficiency, throughput tables and exports",
                 description="Derive T1/TN speedup and speedup/N efficiency from completed points.",
                 epilog=EPILOG, handler=harvest)
    hv.add_argument("campaign", nargs="*", metavar="CAMPAIGN", help=CAMPAIGNS_HELP)
    store_arg(hv)
    hv.add_argument("--to", dest="fmt", default=None,
                    help=format_help() + "; without it, --out FILE's extension chooses (.csv, .json, .md, .parquet)")
    hv.add_argument("--out", default=None, help="write to this file instead of standard output (-: standard output)")
    hv.add_argument("--raw", action="store_true",
                    help="csv and markdown: text cells as stored; by default a csv cell starting with =, +, -, @ "
                         "(a spreadsheet formula) gets a ' before it, and markdown escapes |, \\ and HTML")
    for key in ("platform", "trainer", "experiment"):
        hv.add_argument(f"--{key}", action="append", help=f"only these {key}s (repeatable)")
    hv.add_argument("--gpus", action="append", type=INT64, help="only these GPU counts (repeatable)")
    hv.add_argument("--where", action="append", metavar="KEY=V[,V]",
                    help="only points with these values (platform, trainer, experiment, gpus, nodes, dataset; image: a "
                         "sha256 prefix, an image path or none; a point's setting by its dotted key, e.g. "
                         "trainer.params.backbone=resnet18: its override, else its config's value; repeatable)")
    hv.add_argument("--table", default="scaling", choices=TABLE_CHOICES, help=table_help())
    hv.add_argument("--compare", metavar="reference|ideal|CAMPAIGN", default=None,
                    help="put the reference study's figures, the ideal line or another campaign beside the measured values")
    hv.add_argument("--plots", metavar="DIR", default=None, help="also write the figures (PNG and SVG) to DIR")
    hv.add_argument("--loss-threshold", type=float, default=None, metavar="X",
                    help="--table convergence: iterations, epochs and seconds to the first window whose mean loss is "
                         "below X (default: the point's trainer.params.loss_threshold)")
    hv.add_argument("--x", metavar="KEY", default=None,
                    help="the figures' x axis: gpus (default), nodes or a varying override (e.g. "
                         "experiment.global_batch, backbone): time, speedup, efficiency, throughput and the breakdown "
                         "against it")
    hv.add_argument("--efficiency-floor", type=float, default=None, metavar="E",
                    help="--table model (or all): the knee is the largest N whose efficiency stays at or above E "
                         "(default 0.8)")


def harvest(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``campaign harvest``."""
    from campaign.harvest.run import harvest as harvest_campaign
    from campaign.harvest.export import format_of

    where = {k: v for k in FILTERS if (v := getattr(args, k))}
    out = None if args.out == "-" else args.out  # -: standard output, as Unix tools read it
    fmt = args.fmt or format_of(out)
    return harvest_campaign(args.campaign, store_url=args.store, fmt=fmt, out=out, where=where,
                            where_items=args.where, table=args.table, compare=args.compare, plots=args.plots,
                            loss_threshold=args.loss_threshold, efficiency_floor=args.efficiency_floor, x=args.x,
                            raw=args.raw)
