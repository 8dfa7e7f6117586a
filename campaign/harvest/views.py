"""The two scaling views, named apart (column ``view``).

time-to-solution  the whole training's time T(N) (eq. 3.1, 3.2 of the reference study):
                  speedup = T(1)/T(N), efficiency = speedup/N, ideal T(1)/N. It is a
                  time to *solution* only if every N processes the same images: the
                  reference weak scaling (8 images/GPU, 160K/N iterations) and strong
                  scaling (fixed global batch, same iterations) do; a row whose planned
                  images differ from its 1-GPU baseline says so in ``note``, and so
                  does a row that trains the same whole epochs of the same data as
                  its baseline (epochs.py: the ViT study's strong scaling), whose
                  speedup is kept: its images differ only by each epoch's dropped
                  partial batch and the untimed warm-up.
throughput        per-iteration time and images/s: throughput speedup =
                  (images/s at N) / (images/s at 1), efficiency = that / N; ideal:
                  constant images/s per GPU (so a constant iteration time at a fixed
                  batch per GPU, T_iter(1)/N at a fixed global batch).

With the same images for every N the two views give the same speedup (up to what
happens between iterations); with a fixed per-GPU batch and fixed iterations
(``scaling: fixed``) only the throughput view measures scaling: there the
time-to-solution view leaves speedup, efficiency and the ideal time absent and its
note says why (T(1)/T(N) of different work is no speedup).

Both are medians over repeats (speedup from the medians); spread columns from stats.py.

A series is (platform, trainer, experiment, dataset, variant, image, nodes): ``dataset``
is the dataset and crop it trained on, worded (derive.py: ``ade20k 512px 150 classes``,
``synthetic 512px 150 classes (ade20k's shapes)``), so points of two datasets or crops
are two series, never one median; ``image`` is the container image the points ran in
(derive.py; null without one), so points of different images are never mixed into one
speedup; ``nodes`` keeps intra-node points (one node) apart from inter-node ones: 4 GPUs
as 1x4 and as 2x2 (``placement``, nodes x GPUs per node) are two rows, never one median.
Every series of a platform/trainer/experiment/dataset/variant/image is measured against
the same baseline, its 1-GPU point (on one node), so speedups of an intra- and an
inter-node series compare directly (placement_table puts them side by side at equal GPU
counts).
"""

from __future__ import annotations

import polars as pl

from campaign.harvest.epochs import EPOCH_COLUMNS, dropped_note, same_epochs
from campaign.harvest.stats import repeat_stats

SERIES = ["platform", "trainer", "experiment", "dataset", "variant", "image", "nodes"]
BASELINE_KEYS = SERIES[:-1]  # what a series shares with its 1-GPU baseline: all but nodes
KEYS = SERIES + ["gpus", "placement"]  # placement ("2x2") follows from nodes and gpus
TIME_VIEW = "time-to-solution"
THROUGHPUT_VIEW = "throughput"
SAME_WORK_TOLERANCE = 0.01  # planned images within 1 % of the 1-GPU run's count as the same work

_OPTIONAL = {
    "time_lo_s": pl.Float64, "time_hi_s": pl.Float64, "gpu_hours": pl.Float64, "projected": pl.Boolean,
    "sampled_time_s": pl.Float64, "timed_iterations": pl.Int64, "warmup_s": pl.Float64,
    "gpu_util": pl.Float64, "cpu_util": pl.Float64, "iter_median_s": pl.Float64, "images": pl.Int64,
    "batch_per_gpu": pl.Int64, "iterations": pl.Int64, "dataset": pl.Utf8, "image": pl.Utf8, "image_sha256": pl.Utf8,
    "image_path": pl.Utf8, "global_batch": pl.Int64, "epoch_s": pl.Float64, **EPOCH_COLUMNS,
}


def with_optional(points: pl.DataFrame, spec: dict = _OPTIONAL) -> pl.DataFrame:
    """The point frame with every optional column present (absent ones as nulls), and
    its placement (with_placement)."""
    missing = [pl.lit(None, dtype=t).alias(c) for c, t in spec.items() if c not in points.columns]
    df = points.with_columns(missing) if missing else points
    df = df.with_columns([pl.col(c).cast(t) for c, t in spec.items() if df.schema[c] == pl.Null])
    return with_placement(df)


def with_placement(points: pl.DataFrame) -> pl.DataFrame:
    """``nodes`` (1 where a frame has none) and ``placement``: nodes x GPUs per node, e.g.
    ``1x4`` (intra-node) or ``2x2`` (inter-node) for 4 GPUs."""
    nodes = pl.col("nodes").cast(pl.Int64).fill_null(1) if "nodes" in points.columns else pl.lit(1, dtype=pl.Int64)
    df = points.with_columns(nodes.alias("nodes"))
    return df.with_columns(pl.format("{}x{}", pl.col("nodes"), pl.col("gpus") // pl.col("nodes")).alias("placement"))


def global_batch() -> pl.Expr:
    """The images one iteration takes over all GPUs: the point's ``global_batch`` (derive.py:
    a strong-scaling point's own, 1,024 over 3 GPUs as DataParallel splits it unevenly), else
    ``batch_per_gpu x gpus``."""
    return pl.coalesce("global_batch", pl.col("batch_per_gpu") * pl.col("gpus")).alias("global_batch")


def _baseline(g: pl.DataFrame, *cols) -> pl.DataFrame:
    """Each series' 1-GPU point (on one node): what its speedups are measured against."""
    return g.filter((pl.col("gpus") == 1) & (pl.col("nodes") == 1)).select(BASELINE_KEYS + list(cols))


def _join_note(*parts: pl.Expr) -> pl.Expr:
    return pl.concat_str([p.fill_null("") for p in parts], separator="; ").str.strip_chars("; ").str.replace_all(r"(; )+", "; ")


def scaling_table(points: pl.DataFrame) -> pl.DataFrame:
    """Time-to-solution view per series and GPU count: time (median over repeats, with
    spread), speedup, efficiency, the ideal line, projection marks and GPU-hours."""
    if points.height == 0:
        return pl.DataFrame()
    p = with_optional(points).with_columns(
        (pl.col("images") / pl.coalesce("sampled_time_s", "time_s")).alias("images_per_s"),
        (global_batch() * pl.col("iterations")).alias("images_planned"),
    )
    g = (
        p.group_by(KEYS)
        .agg(
            pl.len().alias("repeats"),
            *repeat_stats("time_s", "time"),
            pl.col("time_lo_s").median(),
            pl.col("time_hi_s").median(),
            pl.col("projected").fill_null(False).any().alias("projected"),
            pl.col("timed_iterations").min().alias("timed_iterations"),
            pl.col("gpu_hours").median(),
            pl.col("iter_median_s").median().alias("iter_s"),
            pl.col("images_per_s").median(),
            pl.col("batch_per_gpu").first(),
            pl.col("iterations").first(),
            pl.col("images_planned").first(),
            *[pl.col(c).first() for c in EPOCH_COLUMNS],
            pl.col("gpu_util").median(),
            pl.col("cpu_util").median(),
            pl.col("epoch_s").median(),
            pl.col("image_sha256").drop_nulls().first(),
            pl.col("image_path").drop_nulls().unique().sort().str.join(", ").alias("image_path"),
        )
        .with_columns((pl.col("images_per_s") / pl.col("gpus")).alias("images_per_s_per_gpu"),
                      pl.when(pl.col("image_path") != "").then(pl.col("image_path")).alias("image_path"))
    )
    g = g.with_columns((pl.col("train_images") - pl.col("epoch_images")).alias("dropped"))
    base = _baseline(g, pl.col("time_s").alias("t1_s"), pl.col("images_planned").alias("images_1"),
                     *[pl.col(c).alias(f"{c}_1") for c in ("epochs", "train_images", "dropped")])
    # T(1)/T(N) is a speedup only when N does the 1-GPU run's work (the same images, or the
    # same whole epochs of the same data: epochs.py); for other work (a fixed schedule: the
    # same iterations at a fixed per-GPU batch) it is no figure of scaling at all, so it
    # stays absent and the note says why.
    differs = ((pl.col("images_planned") - pl.col("images_1")).abs()
               > SAME_WORK_TOLERANCE * pl.col("images_1")).fill_null(False)
    epochs_alike = same_epochs() & (pl.col("images_planned") != pl.col("images_1")).fill_null(False)
    other_work = differs & ~same_epochs()
    out = (
        g.join(base, on=BASELINE_KEYS, how="left", nulls_equal=True)
        .with_columns(
            pl.when(~other_work).then(pl.col("t1_s") / pl.col("time_s")).alias("speedup"),
            pl.when(~other_work).then(pl.col("t1_s") / pl.col("gpus")).alias("ideal_time_s"),
            pl.col("gpus").cast(pl.Float64).alias("ideal_speedup"),
        )
        .with_columns((pl.col("speedup") / pl.col("gpus")).alias("efficiency"))
        .with_columns(
            _join_note(
                pl.when(pl.col("t1_s").is_null()).then(pl.lit("no 1-GPU baseline")),
                pl.when(other_work)
                .then(pl.lit("other images than on 1 GPU: not a time to solution, so no speedup or efficiency; "
                             "see the throughput view")),
                pl.when(epochs_alike).then(dropped_note()),
                pl.when(pl.col("projected")).then(
                    pl.format("projected from {} of {} iterations", pl.col("timed_iterations"), pl.col("iterations"))),
            ).alias("note"),
            pl.lit(TIME_VIEW).alias("view"),
        )
        .sort(KEYS)
    )
    cols = ["view"] + KEYS + ["repeats", "batch_per_gpu", "iterations", "images_planned", "projected",
                              "time_s", "time_min_s", "time_max_s", "time_iqr_s", "time_rel_range", "time_olympic_s",
                              "time_lo_s", "time_hi_s", "ideal_time_s", "speedup", "ideal_speedup", "efficiency",
                              "gpu_hours", "iter_s", "images_per_s", "images_per_s_per_gpu", "gpu_util", "cpu_util",
                              "epoch_s", "image_sha256", "image_path", "note"]
    return out.select(cols)


def throughput_table(points: pl.DataFrame) -> pl.DataFrame:
    """Throughput view per series and GPU count: per-iteration time (median over repeats,
    with spread), images/s, images/s per GPU, throughput speedup and efficiency, ideal."""
    if points.height == 0:
        return pl.DataFrame()
    p = with_optional(points).with_columns(
        (pl.col("images") / pl.coalesce("sampled_time_s", "time_s")).alias("images_per_s"))
    g = (
        p.group_by(KEYS)
        .agg(
            pl.len().alias("repeats"),
            pl.col("batch_per_gpu").first(),
            global_batch().first(),
            *repeat_stats("iter_median_s", "iter"),
            *repeat_stats("images_per_s", "images_per_s", unit=""),
            pl.col("projected").fill_null(False).any().alias("sampled"),
        )
        .with_columns((pl.col("images_per_s") / pl.col("gpus")).alias("images_per_s_per_gpu"))
    )
    base = _baseline(g, pl.col("images_per_s").alias("ips1"), pl.col("iter_s").alias("iter1_s"),
                     pl.col("global_batch").alias("b1"))
    out = (
        g.join(base, on=BASELINE_KEYS, how="left", nulls_equal=True)
        .with_columns(
            (pl.col("images_per_s") / pl.col("ips1")).alias("throughput_speedup"),
            pl.col("ips1").alias("ideal_images_per_s_per_gpu"),
            # constant images/s per GPU: a GPU's share of the real global batch (not the largest share)
            (pl.col("iter1_s") * pl.col("global_batch") / pl.col("gpus") / pl.col("b1")).alias("ideal_iter_s"),
        )
        .with_columns(
            (pl.col("throughput_speedup") / pl.col("gpus")).alias("throughput_efficiency"),
            _join_note(
                pl.when(pl.col("ips1").is_null()).then(pl.lit("no 1-GPU baseline")),
                pl.when(pl.col("sampled")).then(pl.lit("from a sampled window")),
            ).alias("note"),
            pl.lit(THROUGHPUT_VIEW).alias("view"),
        )
        .sort(KEYS)
    )
    cols = ["view"] + KEYS + ["repeats", "batch_per_gpu", "global_batch", "iter_s", "iter_min_s", "iter_max_s",
                              "iter_iqr_s", "iter_rel_range", "iter_olympic_s", "ideal_iter_s", "images_per_s",
                              "images_per_s_min", "images_per_s_max", "images_per_s_olympic", "images_per_s_per_gpu",
                              "ideal_images_per_s_per_gpu", "throughput_speedup", "throughput_efficiency", "note"]
    return out.select(cols)
