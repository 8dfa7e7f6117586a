"""Projection of sampled runs to the full run they stand for, and what every run cost.

A point of a sampled run (``experiment.sample_iterations``, e.g. ``experiment=projection``)
timed k iterations of a schedule of n (``point.iterations``, k < n); its window was
chosen by its data (trainers/sampling.py: warm-up until the iteration times settled at
iteration D >= W, the full run's warm-up; then until the rate's interval was narrow
enough, or the cap). Harvest reports it as ``projected``:

- full training time  = transient + (window - checks) / k x (n - (D - W)), where
  *transient* is the measured seconds of iterations W..D-1 (a full run's window starts
  at W, so they are in it: measured, not projected), *window* the timed window (the
  slowest rank's, gaps between iterations included, like every measured ``time_s``)
  and *checks* the seconds the job spent deciding inside it (taken back out: a full
  run makes no such checks). With a fixed window (``sample_halfwidth=0``) D = W and
  there are no checks: (window / k) x n.
- interval            = the projected part scaled by 1 -+ the window's half-width
  (campaign_window/: batch means of the job's iterations, its slowest rank's
  at each, with the drift term and the full run's own noise; 95 %). It covers the
  window's noise and the level changes the window saw; a change after the sample
  ended is outside what any window can see (benchmarks/projection.py measures how often
  it happens).
- GPU-hours           = (start-up + warm-up + training time) x GPUs / 3600, for
  measured rows too: start-up (process start, imports, process group, model build:
  ``startup_s``, the slowest rank's) and warm-up are paid by every run. For a projected
  row, the warm-up is the full run's (the sample's, less its transient) and the
  training time the projected one; ``sample_gpu_hours`` is what the sampled run itself
  cost (start-up, all its warm-up, its window). Rows written before start-up was
  recorded count none.
"""

from __future__ import annotations

from typing import Optional

import polars as pl

from campaign_window import window_interval

_SAMPLE_COLUMNS = {"warmup_s": pl.Float64, "timed_iterations": pl.Int64, "attempt_id": pl.Int64,
                   "startup_s": pl.Float64, "sample_transient_s": pl.Float64,
                   "sample_transient_iterations": pl.Int64, "sample_check_s": pl.Float64}


def sampled(points: pl.DataFrame) -> pl.Expr:
    """True for a point whose timed window is shorter than its planned schedule."""
    return (pl.col("timed_iterations") < pl.col("iterations")).fill_null(False)


def project_points(points: pl.DataFrame, job_iterations: Optional[pl.DataFrame] = None) -> pl.DataFrame:
    """Add ``projected``, ``sampled_time_s``, ``time_lo_s``/``time_hi_s`` (projected rows
    only), ``gpu_hours`` and ``sample_gpu_hours`` to a point frame; ``time_s`` of a
    projected point becomes the projected full training time. ``job_iterations``:
    attempt_id, iter_s rows in iteration order (the job's timed iterations,
    job_iterations_query), for the sampled attempts at least."""
    if points.height == 0:
        return points
    for col, dtype in _SAMPLE_COLUMNS.items():
        if col not in points.columns:
            points = points.with_columns(pl.lit(None, dtype=dtype).alias(col))
    transient = pl.col("sample_transient_s").fill_null(0.0)
    projected_iterations = (pl.col("iterations") - pl.col("sample_transient_iterations").fill_null(0)).clip(0)
    df = points.with_columns(sampled(points).alias("projected"), pl.col("time_s").alias("sampled_time_s"))
    df = df.with_columns(
        # seconds per timed iteration x iterations still to project (the rate part)
        pl.when(pl.col("projected"))
        .then((pl.col("time_s") - pl.col("sample_check_s").fill_null(0.0)) / pl.col("timed_iterations")
              * projected_iterations)
        .alias("_rate_part"),
    )
    df = df.with_columns(
        pl.when(pl.col("projected")).then(transient + pl.col("_rate_part")).otherwise(pl.col("time_s")).alias("time_s"))
    bounds = _interval_factors(df.filter(pl.col("projected")), job_iterations)
    df = df.join(bounds, on="attempt_id", how="left") if bounds.height else df.with_columns(
        pl.lit(None, dtype=pl.Float64).alias("halfwidth"))
    startup = pl.col("startup_s").fill_null(0.0)
    full_warmup = pl.when(pl.col("projected")).then(pl.col("warmup_s").fill_null(0.0) - transient) \
        .otherwise(pl.col("warmup_s").fill_null(0.0))
    return df.with_columns(
        pl.when(pl.col("projected")).then(transient + pl.col("_rate_part") * (1.0 - pl.col("halfwidth")).clip(0.0))
        .alias("time_lo_s"),
        pl.when(pl.col("projected")).then(transient + pl.col("_rate_part") * (1.0 + pl.col("halfwidth")))
        .alias("time_hi_s"),
        ((startup + full_warmup + pl.col("time_s")) * pl.col("gpus") / 3600.0).alias("gpu_hours"),
        ((startup + pl.col("warmup_s").fill_null(0.0) + pl.col("sampled_time_s")) * pl.col("gpus") / 3600.0)
        .alias("sample_gpu_hours"),
    ).drop("_rate_part", "halfwidth")


def _interval_factors(projected: pl.DataFrame, job_iterations: Optional[pl.DataFrame]) -> pl.DataFrame:
    """Per projected attempt: the relative half-width of its window (campaign_window), with the
    full run's own noise over the iterations it projects."""
    schema = {"attempt_id": pl.Int64, "halfwidth": pl.Float64}
    if job_iterations is None or job_iterations.height == 0 or projected.height == 0:
        return pl.DataFrame(schema=schema)
    full = dict(zip(projected["attempt_id"].to_list(),
                    (projected["iterations"] - projected["sample_transient_iterations"].fill_null(0)).to_list()))
    grouped = (job_iterations.select(pl.col("attempt_id").cast(pl.Int64), pl.col("iter_s").cast(pl.Float64))
               .filter(pl.col("attempt_id").is_in(list(full)) & pl.col("iter_s").is_not_null())
               .group_by("attempt_id", maintain_order=True).agg(pl.col("iter_s")))
    rows = []
    for aid, xs in grouped.iter_rows():
        w = window_interval(xs, full.get(aid))
        if w is not None:
            rows.append((aid, w.halfwidth))
    return pl.DataFrame(rows, schema=schema, orient="row")
