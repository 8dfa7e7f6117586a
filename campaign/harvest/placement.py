"""Intra- vs inter-node at equal GPU counts: the same N GPUs on one node (``1x4``) and
spread over nodes (``2x2``), side by side, as the reference ViT study compares them.

One row per series, GPU count and placement, only at GPU counts where some point ran
on more than one node. Each row beside the one-node placement of the same series and
GPU count (both medians over repeats, from the scaling and throughput views):

  throughput_vs_one_node  images/s of this placement / images/s on one node
                          (< 1: spreading the GPUs over nodes costs throughput)
  time_vs_one_node        training time of this placement / time on one node

On the local test cluster every node is the same machine and the ranks talk over
loopback: these points check that multi-node jobs launch and compute correctly, not
what a fabric's bandwidth does to scaling (README, docs/harvest.md).
"""

from __future__ import annotations

import polars as pl

from campaign.harvest.views import BASELINE_KEYS

COLUMNS = BASELINE_KEYS + [
    "gpus", "placement", "nodes", "gpus_per_node", "span", "repeats", "time_s", "iter_s", "images_per_s",
    "images_per_s_per_gpu", "speedup", "throughput_speedup", "throughput_vs_one_node", "time_vs_one_node", "note",
]


def placement_table(scaling: pl.DataFrame, throughput: pl.DataFrame) -> pl.DataFrame:
    """The intra- vs inter-node comparison (module docstring); empty when no point of the
    tables ran on more than one node."""
    if scaling.height == 0 or "nodes" not in scaling.columns or scaling["nodes"].max() <= 1:
        return pl.DataFrame(schema={c: pl.Utf8 for c in COLUMNS})
    keys = BASELINE_KEYS + ["nodes", "gpus", "placement"]
    rows = scaling.select(keys + ["repeats", "time_s", "speedup"]).join(
        throughput.select(keys + ["iter_s", "images_per_s", "images_per_s_per_gpu", "throughput_speedup"]),
        on=keys, how="left", nulls_equal=True)
    spread = rows.filter(pl.col("nodes") > 1).select(BASELINE_KEYS + ["gpus"]).unique()
    rows = rows.join(spread, on=BASELINE_KEYS + ["gpus"], how="semi", nulls_equal=True)
    one = rows.filter(pl.col("nodes") == 1).select(
        BASELINE_KEYS + ["gpus", pl.col("images_per_s").alias("ips_one"), pl.col("time_s").alias("time_one")])
    return (
        rows.join(one, on=BASELINE_KEYS + ["gpus"], how="left", nulls_equal=True)
        .with_columns(
            (pl.col("gpus") // pl.col("nodes")).alias("gpus_per_node"),
            pl.when(pl.col("nodes") > 1).then(pl.lit("inter-node")).otherwise(pl.lit("intra-node")).alias("span"),
            (pl.col("images_per_s") / pl.col("ips_one")).alias("throughput_vs_one_node"),
            (pl.col("time_s") / pl.col("time_one")).alias("time_vs_one_node"),
            pl.when(pl.col("time_one").is_null())
            .then(pl.format("no one-node point at {} GPUs to compare with", pl.col("gpus")))
            .alias("note"),
        )
        .sort(BASELINE_KEYS + ["gpus", "nodes"], nulls_last=True)
        .select(COLUMNS)
    )
