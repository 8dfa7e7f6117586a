"""Speedup and parallel efficiency (eq. 3.1 and 3.2 of the reference study).

speedup(N) = T(1) / T(N), with T the training time on the same platform, trainer,
experiment and variant; efficiency(N) = speedup(N) / N. Only completed points
count; a series without a 1-GPU point says so instead of inventing a baseline.
"""

from __future__ import annotations

import json
from typing import Optional, Sequence

import polars as pl

from campaign.harvest.query import completed_points_query

SERIES = ["platform", "trainer", "experiment", "variant"]
_SWEEP_KEYS = ("platform", "gpus", "nodes", "repeats", "trainer", "experiment")
_NOT_VARIANT = ("dry_run", "name", "store.url", "results_dir")


def _overrides(overrides: object) -> dict[str, str]:
    """key -> value of a point's overrides, without the sweep axes harvest reports itself."""
    if isinstance(overrides, str):
        overrides = json.loads(overrides)
    out = {}
    for o in overrides or []:
        key, _, value = o.partition("=")
        key = key.lstrip("+~")
        if key in _SWEEP_KEYS or key.startswith("hydra.") or key in _NOT_VARIANT:
            continue
        out[key] = value
    return out


def variants(all_overrides: Sequence[object]) -> list[str]:
    """Per point, the overrides that differ between the campaign's points: what makes
    its series (e.g. ``trainer.optimizer=adamw``). Settings shared by every point, and
    the axes harvest has columns for, are left out."""
    parsed = [_overrides(o) for o in all_overrides]
    keys = sorted({k for d in parsed for k in d})
    varying = [k for k in keys if len({d.get(k) for d in parsed}) > 1]
    return [" ".join(f"{k}={d[k]}" for k in varying if k in d) for d in parsed]


def point_frame(store, campaign_ids: Sequence[str], where: Optional[dict] = None) -> pl.DataFrame:
    """One row per completed point (SQL aggregates over ranks)."""
    q = completed_points_query(campaign_ids, where)
    with store.engine.connect() as conn:
        result = conn.execute(q)
        cols = list(result.keys())
        rows = result.all()
    df = pl.DataFrame([dict(zip(cols, r)) for r in rows], schema_overrides={"overrides": pl.Object} if rows else None,
                      orient="row") if rows else pl.DataFrame(schema={c: pl.Null for c in cols})
    if df.height == 0:
        return df.with_columns(pl.lit("").alias("variant"))
    return df.drop("overrides").with_columns(pl.Series("variant", variants(df["overrides"].to_list()), dtype=pl.Utf8))


def scaling_table(points: pl.DataFrame) -> pl.DataFrame:
    """Per series and GPU count: time (median over repeats), throughput, speedup, efficiency."""
    if points.height == 0:
        return pl.DataFrame()
    g = (
        points.with_columns(
            (pl.col("images") / pl.col("time_s")).alias("images_per_s"),
        )
        .group_by(SERIES + ["gpus"])
        .agg(
            pl.len().alias("repeats"),
            pl.col("time_s").median().alias("time_s"),
            pl.col("time_s").min().alias("time_min_s"),
            pl.col("time_s").max().alias("time_max_s"),
            pl.col("iter_median_s").median().alias("iter_s"),
            pl.col("images_per_s").median().alias("images_per_s"),
            pl.col("batch_per_gpu").first().alias("batch_per_gpu"),
            pl.col("iterations").first().alias("iterations"),
            pl.col("gpu_util").median().alias("gpu_util"),
            pl.col("cpu_util").median().alias("cpu_util"),
        )
        .with_columns((pl.col("images_per_s") / pl.col("gpus")).alias("images_per_s_per_gpu"))
    )
    base = g.filter(pl.col("gpus") == 1).select(SERIES + [pl.col("time_s").alias("t1_s")])
    out = (
        g.join(base, on=SERIES, how="left", nulls_equal=True)
        .with_columns((pl.col("t1_s") / pl.col("time_s")).alias("speedup"))
        .with_columns((pl.col("speedup") / pl.col("gpus")).alias("efficiency"))
        .with_columns(
            pl.when(pl.col("t1_s").is_null()).then(pl.lit("no 1-GPU baseline")).otherwise(pl.lit("")).alias("note")
        )
        .drop("t1_s")
        .sort(SERIES + ["gpus"])
    )
    cols = SERIES + ["gpus", "repeats", "batch_per_gpu", "iterations", "time_s", "time_min_s", "time_max_s",
                     "iter_s", "images_per_s", "images_per_s_per_gpu", "speedup", "efficiency", "gpu_util", "cpu_util", "note"]
    return out.select(cols)
