"""Where the time goes: utilisation and phase breakdown per series and GPU count.

utilisation  GPU util = device busy time (the union of its kernel, memcpy and memset
             intervals) / the profiler window's wall time, and CPU util = the host's
             busy time (the union of every thread's operator intervals) / that window,
             both <= 1 (``experiment.profile_iterations``; read from each rank's trace
             by campaign_trace): the physical reading, docs/gpu.md; beside them
             ``gpu_util_study`` and ``cpu_util_study``, the reference study's eq. 3.3 as
             it computed it: the profiler's CUDA time total / (its CPU time total + CUDA
             time total) of the same window and the CPU's counterpart (they add up to 1,
             so one falls as the other rises: its Figures 4-5; ``study_utilisation``),
             from the totals beside them, ``cpu_time_total_s`` and ``device_time_total_s``
             (sums, campaign_trace/totals.py), never from ``device_busy_s``, the union the
             physical GPU column divides; ``cpu_busy_cores``, the
             operators' thread-seconds / the window: how many cores were busy on
             average (a count, it passes 1 with several threads, so it is not called a
             utilisation); and the timed window's shares: compute, communication,
             data-loader wait (each rank's phase seconds over its window, averaged over
             ranks). ``trace_files``: the
             ranks' profiler traces (open them with ``campaign trace``, Perfetto or
             TensorBoard); a profiler that failed is named in ``note``.
breakdown    one row per (source, phase): seconds per run, per iteration and share of
             the window, from the timed window's summary (rank_timing: data wait,
             compute, communication), the profiler window (profile) and the per-phase
             rows of the timed iterations (breakdown: the job's data/forward/backward/
             step/comm/iteration, and an engine's own, e.g. deepspeed.<timer>).
             Shares of overlapping phases (comm runs during backward) do not add up.
             ``epoch_<i>`` rows (each epoch's iterations, warm-up in epoch 0) are not
             in the timed window: their share is of the whole run (they add up to 1).
             ``study.*`` rows (source ``study``): the DataParallel study's own timings,
             measured as it defines them (trainers/dp_study.py), beside campaign's.
phase stack  the disjoint phases that tile an iteration (data wait, forward, backward
             compute, exposed communication, optimizer step, ...), mean seconds per
             iteration per series and GPU count: the stacked bars of the breakdown figure.

What was not recorded stays absent (null, "-" in a terminal), never zero: CPU ranks
have no device time, trainers that mark no ``comm`` phase have no communication share.
"""

from __future__ import annotations

from typing import Optional

import polars as pl

from campaign.harvest.epochs import EPOCH_PHASE
from campaign.harvest.views import KEYS, SERIES, with_optional

_UTIL_COLUMNS = {
    "gpu_util": pl.Float64, "cpu_util": pl.Float64, "compute_share": pl.Float64, "comm_share": pl.Float64,
    "data_wait_share": pl.Float64, "profile_total_s": pl.Float64, "profile_cpu_s": pl.Float64,
    "profile_device_s": pl.Float64, "profile_comm_s": pl.Float64, "profile_exposed_comm_s": pl.Float64,
    "profile_iterations": pl.Int64, "data_wait_s": pl.Float64, "compute_s": pl.Float64, "comm_s": pl.Float64,
    "timed_iterations": pl.Int64, "sampled_time_s": pl.Float64, "attempt_id": pl.Int64,
    "profile_warning": pl.Utf8, "trace_files": pl.Utf8, "profile_cpu_total_s": pl.Float64,
    "profile_device_total_s": pl.Float64,
}
NO_TOTALS = "no profiler totals stored (a store written before they were): no eq. 3.3"


def _ratio(num: str, den: str) -> pl.Expr:
    return pl.when(pl.col(den) > 0).then(pl.col(num) / pl.col(den))


def study_utilisation(cpu_s: str = "profile_cpu_total_s",
                      device_s: str = "profile_device_total_s") -> tuple[pl.Expr, pl.Expr]:
    """(GPU, CPU) utilisation as the reference study's eq. 3.3 computes it, T_d / T_t.

    Its section 3.1: "device utilization is considered to be the ratio of the amount of
    compute time spent for a specific device, T_d, to the total compute time, T_t" (eq.
    3.3); its section 4.2: "PyTorch Profiler offers functionality to track CPU and CUDA
    (GPU) time ... From the CPU and GPU time over 8 iterations, CPU and GPU utilization
    metrics are calculated". Both terms are the profiler's totals, sums (its "Self CPU time
    total" and "Self CUDA time total": campaign_trace/totals.py), and T_t is their sum
    (section 5.3: GPU utilisation falls *because* CPU time rises, so both share that
    denominator): device / (cpu + device) and cpu / (cpu + device), of a point's ranks'
    mean totals. Each in 0..1, the two add up to 1. Absent (null) without device time (CPU
    ranks, no profiler) and where the store holds no totals (``NO_TOTALS``)."""
    total = pl.col(cpu_s) + pl.col(device_s)
    has = pl.col(device_s).is_not_null() & pl.col(cpu_s).is_not_null() & (total > 0)
    return (pl.when(has).then(pl.col(device_s) / total).alias("gpu_util_study"),
            pl.when(has).then(pl.col(cpu_s) / total).alias("cpu_util_study"))


def utilisation_table(points: pl.DataFrame) -> pl.DataFrame:
    """GPU/CPU utilisation of the profiler window (physical, and the study's eq. 3.3:
    ``study_utilisation``) and the timed window's shares (medians over repeats)."""
    if points.height == 0:
        return pl.DataFrame()
    p = with_optional(with_optional(points), _UTIL_COLUMNS).with_columns(
        *study_utilisation(),
        _ratio("profile_cpu_s", "profile_total_s").alias("cpu_busy_cores"),
        _ratio("profile_comm_s", "profile_total_s").alias("profile_comm_share"),
        _ratio("profile_exposed_comm_s", "profile_total_s").alias("exposed_comm_share"),
        # the SQL aggregate lists a point's files in no particular order: rank order here
        pl.col("trace_files").str.split("\n").list.sort().list.join(" ").alias("trace_files"),
    )
    out = (
        p.group_by(KEYS)
        .agg(
            pl.len().alias("repeats"),
            pl.col("profile_iterations").max().alias("profiled_iterations"),
            *[pl.col(c).median() for c in ("gpu_util", "cpu_util", "gpu_util_study", "cpu_util_study",
                                           "cpu_busy_cores", "compute_share", "comm_share",
                                           "data_wait_share", "profile_comm_share", "exposed_comm_share")],
            pl.col("profile_cpu_total_s").median().alias("cpu_time_total_s"),
            pl.col("profile_device_total_s").median().alias("device_time_total_s"),
            pl.col("profile_device_s").median().alias("device_busy_s"),
            pl.col("profile_warning").drop_nulls().first(),
            pl.col("trace_files").drop_nulls().sort().str.join(" "),
        )
        .with_columns(
            pl.when(pl.col("profiled_iterations").is_null())
            .then(pl.lit("no profiler window (experiment.profile_iterations=0)"))
            .when(pl.col("profile_warning").is_not_null())
            .then(pl.lit("no profile figures: ") + pl.col("profile_warning"))
            .when(pl.col("gpu_util").is_null())
            .then(pl.lit("no device time (CPU ranks)"))
            .when(pl.col("gpu_util_study").is_null())
            .then(pl.lit(NO_TOTALS))
            .otherwise(pl.lit(""))
            .alias("note"),
            pl.when(pl.col("trace_files") != "").then(pl.col("trace_files")).alias("trace_files"),
        )
        .sort(KEYS)
    )
    return out.select(KEYS + ["repeats", "profiled_iterations", "gpu_util", "cpu_util", "gpu_util_study",
                              "cpu_util_study", "cpu_time_total_s", "device_time_total_s", "device_busy_s",
                              "cpu_busy_cores",
                              "compute_share", "comm_share",
                              "data_wait_share", "profile_comm_share", "exposed_comm_share", "note", "trace_files"])


# (source, phase, seconds column, share denominator, per-iteration denominator)
_PHASES = [
    ("timed window", "data wait", "data_wait_s", "sampled_time_s", "timed_iterations"),
    ("timed window", "compute", "compute_s", "sampled_time_s", "timed_iterations"),
    ("timed window", "communication", "comm_s", "sampled_time_s", "timed_iterations"),
    ("profiler", "cpu", "profile_cpu_s", "profile_total_s", "profile_iterations"),
    ("profiler", "device", "profile_device_s", "profile_total_s", "profile_iterations"),
    ("profiler", "communication", "profile_comm_s", "profile_total_s", "profile_iterations"),
    ("profiler", "exposed communication", "profile_exposed_comm_s", "profile_total_s", "profile_iterations"),
]
_SHARE_COLUMN = {"data_wait_s": "data_wait_share", "compute_s": "compute_share", "comm_s": "comm_share"}
STUDY_PREFIX = "study."  # a study's own definitions (trainers/dp_study.py): source "study"


def breakdown_table(points: pl.DataFrame, engine_phases: Optional[pl.DataFrame] = None) -> pl.DataFrame:
    """Long table of phases per series, GPU count and source (medians over repeats).

    ``engine_phases``: attempt_id, phase, total_s, mean_s, share rows (breakdown_query)."""
    if points.height == 0:
        return pl.DataFrame()
    p = with_optional(with_optional(points), _UTIL_COLUMNS)
    if "sampled_time_s" in points.columns:
        p = p.with_columns(pl.coalesce("sampled_time_s", "time_s").alias("sampled_time_s"))
    else:
        p = p.with_columns(pl.col("time_s").alias("sampled_time_s"))
    order = {(s, ph): i for i, (s, ph, *_rest) in enumerate(_PHASES)}
    parts = []
    for source, phase, sec, den, per in _PHASES:
        # Ranks' own shares (seconds / window per rank) where the SQL computed them.
        share = pl.col(_SHARE_COLUMN[sec]) if sec in _SHARE_COLUMN and _SHARE_COLUMN[sec] in points.columns \
            else _ratio(sec, den)
        parts.append(p.select(
            *KEYS, pl.lit(source).alias("source"), pl.lit(phase).alias("phase"),
            pl.lit(order[(source, phase)]).alias("order"),
            pl.col(sec).cast(pl.Float64).alias("seconds"),
            _ratio(sec, per).cast(pl.Float64).alias("per_iteration_s"),
            share.cast(pl.Float64).alias("share"),
        ))
    if engine_phases is not None and engine_phases.height and "attempt_id" in points.columns:
        eng = engine_phases.join(p.select(KEYS + ["attempt_id"]), on="attempt_id", how="inner")
        share = pl.col("share") if "share" in eng.columns else pl.lit(None)
        # An epoch row spans its epoch's iterations, warm-up included, not the timed window:
        # its share is of the whole run (the attempt's epoch rows together), never of the window.
        epoch = pl.col("phase").cast(pl.Utf8).str.contains(EPOCH_PHASE)
        of_run = pl.col("total_s") / pl.col("total_s").filter(epoch).sum().over("attempt_id")
        share = pl.when(epoch).then(of_run).otherwise(share)
        parts.append(eng.select(
            # the DataParallel study's own definitions (trainers/dp_study.py) named as the study's
            *KEYS, pl.when(pl.col("phase").cast(pl.Utf8).str.starts_with(STUDY_PREFIX)).then(pl.lit("study"))
            .otherwise(pl.lit("phases")).alias("source"), pl.col("phase").cast(pl.Utf8),
            pl.lit(len(_PHASES)).alias("order"),
            pl.col("total_s").cast(pl.Float64).alias("seconds"),
            pl.col("mean_s").cast(pl.Float64).alias("per_iteration_s"),
            share.cast(pl.Float64).alias("share"),
        ))
    long = pl.concat(parts, how="vertical_relaxed")
    return (
        long.group_by(KEYS + ["source", "phase", "order"])
        .agg(pl.len().alias("repeats"), pl.col("seconds").median(), pl.col("per_iteration_s").median(),
             pl.col("share").median())
        .sort(SERIES + ["gpus", "order", "phase"])
        .drop("order")
        .select(KEYS + ["source", "phase", "repeats", "seconds", "per_iteration_s", "share"])
    )


# The phases that tile an iteration (docs/breakdown.md: data + forward + backward + step
# + comm_marked = iteration, backward = backward_compute + comm_exposed), bottom to top,
# with their legend labels. ``comm`` (the all-reduce in flight) overlaps backward and is
# never stacked; ``comm_exposed`` is stacked only beside ``backward_compute`` (it is part
# of ``backward``), and ``backward`` only where no split was recorded. A ``step`` with no
# forward or backward beside it holds them (a loop that times forward, backward and update
# as one call, MMEngine's run_iter: trainer.params.loop=stock): ``train_step``, so named.
STACK_PHASES = [
    ("data", "data wait"),
    ("forward", "forward"),
    ("backward", "backward (no all-reduce timed)"),
    ("backward_compute", "backward compute"),
    ("comm_exposed", "exposed communication (not hidden by backward)"),
    ("comm_marked", "communication (trainer's own phase)"),
    ("step", "optimizer step"),
    ("train_step", "forward + backward + step (not timed apart)"),
]
_APART = ("forward", "backward", "backward_compute")  # phases whose presence makes ``step`` the update alone


def phase_stack(points: pl.DataFrame, engine_phases: Optional[pl.DataFrame]) -> pl.DataFrame:
    """Per series and GPU count, the mean seconds per iteration of each disjoint phase
    (``STACK_PHASES``, in stacking order) and of the whole ``iteration``: the means over
    repeats of the ranks' mean per-iteration seconds (means, so the phases add up to the
    iteration as they do in every run). Phases a run did not record have no row."""
    schema = {**{k: pl.Utf8 for k in SERIES}, "nodes": pl.Int64, "gpus": pl.Int64, "phase": pl.Utf8, "label": pl.Utf8,
              "order": pl.Int64, "per_iteration_s": pl.Float64, "repeats": pl.Int64}
    if points.height == 0 or engine_phases is None or engine_phases.height == 0 or "attempt_id" not in points.columns:
        return pl.DataFrame(schema=schema)
    names = [p for p, _ in STACK_PHASES] + ["iteration"]
    rows = (
        engine_phases.filter(pl.col("phase").is_in(names) & pl.col("mean_s").is_not_null())
        .join(with_optional(points).select(KEYS + ["attempt_id"]), on="attempt_id", how="inner")
        .group_by(KEYS + ["phase"])
        .agg(pl.col("mean_s").cast(pl.Float64).mean().alias("per_iteration_s"), pl.len().alias("repeats"))
    )
    split = rows.filter(pl.col("phase") == "backward_compute").select(KEYS).with_columns(pl.lit(True).alias("split"))
    rows = rows.join(split, on=KEYS, how="left", nulls_equal=True).with_columns(pl.col("split").fill_null(False))
    rows = rows.filter(  # never stack a phase inside another one
        ~((pl.col("phase") == "backward") & pl.col("split")) & ~((pl.col("phase") == "comm_exposed") & ~pl.col("split")))
    apart = rows.filter(pl.col("phase").is_in(_APART)).select(KEYS).unique().with_columns(pl.lit(True).alias("apart"))
    rows = rows.join(apart, on=KEYS, how="left", nulls_equal=True).with_columns(
        pl.when((pl.col("phase") == "step") & pl.col("apart").is_null()).then(pl.lit("train_step"))
        .otherwise(pl.col("phase")).alias("phase"))
    labels = dict(STACK_PHASES) | {"iteration": "iteration"}
    order = {p: i for i, p in enumerate(names)}
    return (
        rows.with_columns(pl.col("phase").replace_strict(labels).alias("label"),
                          pl.col("phase").replace_strict(order, return_dtype=pl.Int64).alias("order"))
        .sort(SERIES + ["gpus", "order"], nulls_last=True)
        .select(list(schema))
        .cast(schema)
    )
