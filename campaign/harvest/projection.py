"""Projection of sampled runs to the full run they stand for.

A point of a sampled run (``experiment.sample_iterations``, e.g. ``experiment=projection``)
timed k iterations of a schedule of n (``point.iterations``, k < n). Harvest reports it
as ``projected``:

- full training time  = (timed window / k) x n. The timed window is the slowest rank's,
  gaps between iterations included, and, like every measured ``time_s``, it leaves the
  warm-up out: a projected row compares one to one with a measured full run's row.
- GPU-hours           = (training time + warm-up) x GPUs / 3600, for measured rows too:
  the warm-up is paid on every run, so it counts in what a run costs (the measured
  warm-up of the sample stands for the full run's, which has as many warm-up iterations).
- interval            = the 95 % percentile-bootstrap interval of the mean iteration
  time (the job's iteration: its slowest rank's, from the ``iteration`` rows), scaled
  the same way; every sampled attempt's at once (stats.py). It is the noise of a short
  window; a drift over the long run (thermal throttling, a file system slowing down) is
  outside what any short window can see.
"""

from __future__ import annotations

from typing import Optional

import polars as pl

from campaign.harvest.stats import bootstrap_mean_intervals


def sampled(points: pl.DataFrame) -> pl.Expr:
    """True for a point whose timed window is shorter than its planned schedule."""
    return (pl.col("timed_iterations") < pl.col("iterations")).fill_null(False)


def project_points(points: pl.DataFrame, job_iterations: Optional[pl.DataFrame] = None) -> pl.DataFrame:
    """Add ``projected``, ``sampled_time_s``, ``time_lo_s``/``time_hi_s`` (projected rows
    only) and ``gpu_hours`` to a point frame; ``time_s`` of a projected point becomes the
    projected full training time. ``job_iterations``: attempt_id, iter_s rows (the job's
    timed iterations, job_iterations_query), for the sampled attempts at least."""
    if points.height == 0:
        return points
    for col, dtype in (("warmup_s", pl.Float64), ("timed_iterations", pl.Int64), ("attempt_id", pl.Int64)):
        if col not in points.columns:
            points = points.with_columns(pl.lit(None, dtype=dtype).alias(col))
    df = points.with_columns(sampled(points).alias("projected"), pl.col("time_s").alias("sampled_time_s"))
    df = df.with_columns(
        pl.when(pl.col("projected"))
        .then(pl.col("time_s") / pl.col("timed_iterations") * pl.col("iterations"))
        .otherwise(pl.col("time_s"))
        .alias("time_s")
    )
    bounds = _interval_factors(df.filter(pl.col("projected"))["attempt_id"].to_list(), job_iterations)
    df = df.join(bounds, on="attempt_id", how="left") if bounds.height else df.with_columns(
        pl.lit(None, dtype=pl.Float64).alias("lo_factor"), pl.lit(None, dtype=pl.Float64).alias("hi_factor"))
    return df.with_columns(
        pl.when(pl.col("projected")).then(pl.col("time_s") * pl.col("lo_factor")).alias("time_lo_s"),
        pl.when(pl.col("projected")).then(pl.col("time_s") * pl.col("hi_factor")).alias("time_hi_s"),
        ((pl.col("time_s") + pl.col("warmup_s").fill_null(0.0)) * pl.col("gpus") / 3600.0).alias("gpu_hours"),
    ).drop("lo_factor", "hi_factor")


def _interval_factors(attempt_ids: list, job_iterations: Optional[pl.DataFrame]) -> pl.DataFrame:
    """Per attempt: (low / mean, high / mean) of the bootstrapped mean iteration time."""
    schema = {"attempt_id": pl.Int64, "lo_factor": pl.Float64, "hi_factor": pl.Float64}
    if job_iterations is None or job_iterations.height == 0 or not attempt_ids:
        return pl.DataFrame(schema=schema)
    rows = job_iterations.select(pl.col("attempt_id").cast(pl.Int64), pl.col("iter_s")).filter(
        pl.col("attempt_id").is_in([int(a) for a in attempt_ids]))
    return (
        bootstrap_mean_intervals(rows, by="attempt_id", value="iter_s")
        .filter(pl.col("mean") > 0)
        .select("attempt_id", (pl.col("lo") / pl.col("mean")).alias("lo_factor"),
                (pl.col("hi") / pl.col("mean")).alias("hi_factor"))
        .cast(schema)
    )
