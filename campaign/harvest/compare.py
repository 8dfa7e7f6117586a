"""Measured values beside another set of values: the ideal line, or another campaign.

Both give one row per series, GPU count and metric with ``measured``, ``reference``,
``difference`` (measured - reference) and ``relative`` (measured / reference - 1).

Another campaign is matched on the GPU count and on each series key (platform,
trainer, experiment, variant) whose values the two campaigns share; a key whose
values are disjoint (a V100 campaign against an A100 one, a projection campaign
against its full run) is not matched on and shows as ``key`` / ``other_key``.
"""

from __future__ import annotations

import polars as pl

from campaign.harvest.views import KEYS, SERIES, THROUGHPUT_VIEW, TIME_VIEW

# (view, metric column, ideal column or literal)
IDEAL = [
    (TIME_VIEW, "time_s", "ideal_time_s"),
    (TIME_VIEW, "speedup", "ideal_speedup"),
    (TIME_VIEW, "efficiency", 1.0),
    (THROUGHPUT_VIEW, "iter_s", "ideal_iter_s"),
    (THROUGHPUT_VIEW, "images_per_s_per_gpu", "ideal_images_per_s_per_gpu"),
    (THROUGHPUT_VIEW, "throughput_speedup", "gpus"),
    (THROUGHPUT_VIEW, "throughput_efficiency", 1.0),
]
CAMPAIGN_METRICS = [
    (TIME_VIEW, "time_s"), (TIME_VIEW, "speedup"), (TIME_VIEW, "efficiency"), (TIME_VIEW, "gpu_hours"),
    (THROUGHPUT_VIEW, "iter_s"), (THROUGHPUT_VIEW, "images_per_s_per_gpu"), (THROUGHPUT_VIEW, "throughput_speedup"),
    (TIME_VIEW, "gpu_util"), (TIME_VIEW, "cpu_util"),
]


def _finish(df: pl.DataFrame) -> pl.DataFrame:
    return df.with_columns(
        (pl.col("measured") - pl.col("reference")).alias("difference"),
        pl.when(pl.col("reference") != 0).then(pl.col("measured") / pl.col("reference") - 1.0).alias("relative"),
    )


def compare_ideal(scaling: pl.DataFrame, throughput: pl.DataFrame) -> pl.DataFrame:
    """Each view's metrics beside their ideal (T1/N, S = N, efficiency 1, constant images/s per GPU)."""
    parts = []
    for view, metric, ideal in IDEAL:
        src = scaling if view == TIME_VIEW else throughput
        if src.height == 0:
            continue
        ref = pl.lit(ideal, dtype=pl.Float64) if isinstance(ideal, float) else pl.col(ideal).cast(pl.Float64)
        parts.append(src.select(
            pl.lit(view).alias("view"), *KEYS, pl.lit(metric).alias("metric"),
            pl.col(metric).cast(pl.Float64).alias("measured"), ref.alias("reference"),
        ))
    if not parts:
        return pl.DataFrame()
    return _finish(pl.concat(parts)).sort(KEYS, maintain_order=True)


def _wide(scaling: pl.DataFrame, throughput: pl.DataFrame) -> pl.DataFrame:
    t = throughput.select(KEYS + ["iter_s", "images_per_s_per_gpu", "throughput_speedup"])
    return scaling.drop("iter_s", "images_per_s_per_gpu").join(t, on=KEYS, how="left", nulls_equal=True)


def compare_campaigns(this: tuple[pl.DataFrame, pl.DataFrame], other: tuple[pl.DataFrame, pl.DataFrame],
                      other_id: str) -> pl.DataFrame:
    """This campaign's (scaling, throughput) tables beside another campaign's."""
    a, b = _wide(*this), _wide(*other)
    on = ["gpus"] + [k for k in SERIES if set(a[k].to_list()) & set(b[k].to_list())]
    loose = [k for k in SERIES if k not in on]
    keep = on + loose + ["projected"] + [m for _, m in CAMPAIGN_METRICS]
    joined = a.select(keep).join(b.select(keep), on=on, how="inner", suffix="_other", nulls_equal=True)
    parts = [
        joined.select(
            pl.lit(view).alias("view"), *[pl.col(k) for k in SERIES],
            *[pl.col(f"{k}_other").alias(f"other_{k}") for k in loose], pl.col("gpus"),
            pl.col("projected"), pl.col("projected_other").alias("other_projected"),
            pl.lit(metric).alias("metric"), pl.col(metric).cast(pl.Float64).alias("measured"),
            pl.col(f"{metric}_other").cast(pl.Float64).alias("reference"),
            pl.lit(other_id).alias("other_campaign"),
        )
        for view, metric in CAMPAIGN_METRICS
    ]
    if not parts or joined.height == 0:
        return pl.DataFrame()
    return _finish(pl.concat(parts)).sort(SERIES + ["gpus"], maintain_order=True)
