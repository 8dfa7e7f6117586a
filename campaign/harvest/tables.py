"""The harvest's tables, registered once: ``campaign harvest --table NAME`` offers exactly
these (and ``all``), its ``--help`` and titles come from here, and ``run.py`` builds each
from its entry. Light on purpose (no polars): the CLI reads the names to build its parser.

A table is built by ``build`` (``module:function``) from its ``inputs``, in that order:
``points`` (the campaign's point frame, ``derive.point_frame``: one row per completed
point), ``phases`` (the engines' own phase rows, ``derive.engine_phases``) or another
registered table by name (built first). A table not ``of_points`` is built from the store
and the campaign instead (``function(store, campaign) -> (frame, warnings)``): every
attempt, whatever its state (``attempts``); ``--table all`` means every table of points.
Adding a table = one entry here and its function.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TableSpec:
    name: str
    help: str  # what --help says of it, a few words
    title: str  # the line printed above it on the terminal
    build: str  # "module:function" building it from its inputs
    inputs: tuple[str, ...] = ("points",)  # "points", "phases" or registered tables' names, in call order
    terminal: tuple[str, ...] = ()  # the columns the terminal shows (exports carry all); () = all
    optional: bool = False  # with --table all, shown only when it has rows (e.g. placement: only inter-node campaigns)
    empty: str = ""  # why an optional table has no rows (asked for alone, harvest says this and exits 1)
    of_points: bool = True  # built from the completed points (False: from the store and the campaign)

    @property
    def needs_phases(self) -> bool:
        return "phases" in self.inputs


_SERIES = ("platform", "trainer", "experiment", "dataset", "variant", "image", "gpus", "placement", "repeats")

TABLES: dict[str, TableSpec] = {t.name: t for t in (
    TableSpec(
        "scaling", "time to solution (default): T(N), speedup, efficiency",
        "time to solution: training time T(N) (slowest rank, median over repeats; warm-up apart); "
        "speedup = T(1)/T(N), efficiency = speedup/N, ideal T(1)/N",
        "campaign.harvest.views:scaling_table",
        terminal=_SERIES + ("iterations", "time_s", "time_min_s", "time_max_s", "time_olympic_s", "ideal_time_s",
                            "speedup", "efficiency", "gpu_hours", "note")),
    TableSpec(
        "throughput", "per-iteration time and images/s",
        "throughput: per-iteration time and images/s (medians over repeats); throughput speedup = images/s at N / "
        "images/s at 1, efficiency = that/N, ideal: constant images/s per GPU",
        "campaign.harvest.views:throughput_table",
        terminal=_SERIES + ("global_batch", "iter_s", "iter_iqr_s", "ideal_iter_s", "images_per_s",
                            "images_per_s_per_gpu", "ideal_images_per_s_per_gpu", "throughput_speedup",
                            "throughput_efficiency", "note")),
    TableSpec(
        "utilisation", "GPU/CPU utilisation of the profiler window (and the study's way), time shares",
        "utilisation: GPU and CPU busy time / the profiler window's wall time (<= 1; cpu_busy_cores: "
        "mean busy cores); *_util_study: the reference study's eq. 3.3, the profiler's CUDA time total / (its CPU + CUDA "
        "time totals), adding up to 1; compute, communication and data-wait shares of the timed window",
        "campaign.harvest.utilisation:utilisation_table"),
    TableSpec(
        "breakdown", "seconds per phase (data, forward, backward, step, comm)",
        "breakdown: seconds per phase, per run and per iteration, and share of its window",
        "campaign.harvest.utilisation:breakdown_table", inputs=("points", "phases")),
    TableSpec(
        "hardware", "MFU, all-reduce bandwidth, memory",
        "hardware: model FLOPs utilisation (achieved / peak TFLOP/s per GPU), all-reduce volume and bus "
        "bandwidth vs the interconnect, exposed communication per iteration, peak memory (medians over repeats)",
        "campaign.harvest.hardware:hardware_table",
        terminal=_SERIES + ("precision", "math", "achieved_tflops", "peak_tflops", "mfu", "allreduce_mb_per_iter",
                            "busbw_gbs", "busbw_fraction", "exposed_comm_ms", "sync_gb_per_epoch",
                            "sync_gb_per_epoch_text", "peak_memory_gb", "warmup_peak_memory_gb", "note")),
    TableSpec(
        "placement", "intra- vs inter-node at equal GPU counts",
        "placement: the same GPU count on one node (intra-node, 1xN) and over several (inter-node, e.g. 2x2), "
        "side by side (medians over repeats); throughput_vs_one_node = images/s / images/s on one node",
        "campaign.harvest.placement:placement_table", inputs=("scaling", "throughput"), optional=True,
        empty="no point ran on more than one node, so nothing to compare at equal GPU counts "
              "(launch both, e.g. gpus=2,4 nodes=1,2)",
        terminal=("platform", "trainer", "experiment", "dataset", "variant", "image", "gpus", "placement", "span",
                  "repeats",
                  "time_s", "iter_s", "images_per_s_per_gpu", "speedup", "throughput_vs_one_node",
                  "time_vs_one_node", "note")),
    TableSpec(
        "model", "fitted t(N) = a + b/N + c log2 N + d ring, knee, predictions, communication bound",
        "model: time per image t(N) fitted per series with t(N) = a + b/N + c*log2(N) + d*r(N) (serial, divides, "
        "tree, ring; >= 0, terms chosen by the data; docs/model.md); error at each measured N, predictions at 2x "
        "and 4x the largest N (kind predicted), 95 % intervals; knee: largest N with efficiency >= 0.8; comm vs "
        "its ring all-reduce bound 2(N-1)/N x bytes / bandwidth",
        "campaign.harvest.model:model_table",
        terminal=("platform", "trainer", "experiment", "dataset", "variant", "image", "span", "gpus", "kind", "repeats",
                  "t_image_s", "fit_t_image_s", "fit_lo_s", "fit_hi_s", "error", "speedup", "efficiency", "time_s",
                  "gpu_hours", "terms", "knee_gpus", "fastest_gpus", "cheapest_gpus", "comm_over_bound", "note")),
    TableSpec(
        "attempts", "every run of every point: state, reason, elapsed, node",
        "attempts: every run of every point (a submission, or a requeue of its job); harvest's figures come from "
        "each point's latest completed attempt",
        "campaign.harvest.attempts:harvest_attempts", inputs=("store", "campaign"), of_points=False),
    TableSpec(
        "convergence", "loss (and accuracy) per epoch and iteration window, to a loss threshold",
        "convergence: mean loss over all ranks per epoch and per iteration window, train and test accuracy and "
        "test loss where stored; wall_s and to_threshold_* count the warm-up (first window whose mean loss is "
        "below the threshold: --loss-threshold, else trainer.params.loss_threshold)",
        "campaign.harvest.convergence:convergence_table", inputs=("store", "campaign"), of_points=False),
)}
POINT_TABLES = tuple(name for name, spec in TABLES.items() if spec.of_points)  # what --table all shows
TABLE_CHOICES = POINT_TABLES + ("all",) + tuple(name for name in TABLES if name not in POINT_TABLES)


def table_help() -> str:
    """The --table help text: every registered table with its few words."""
    return "; ".join([*(f"{n}: {TABLES[n].help}" for n in POINT_TABLES), "all: every table above",
                      *(f"{t.name}: {t.help}" for t in TABLES.values() if not t.of_points)])


def table_function(name: str):
    """The function that builds the registered table ``name``."""
    import importlib

    module, func = TABLES[name].build.split(":")
    return getattr(importlib.import_module(module), func)


def build_tables(names, points, phases=None) -> dict:
    """The registered tables ``names`` (and the tables they are built from) from the point
    frame and phase rows, each built once, inputs first."""
    built: dict = {}

    def build(name: str):
        if name not in built:
            spec = TABLES[name]
            sources = {"points": points, "phases": phases}
            args = [sources[i] if i in sources else build(i) for i in spec.inputs]
            built[name] = table_function(name)(*args)
        return built[name]

    for name in names:
        build(name)
    return built
