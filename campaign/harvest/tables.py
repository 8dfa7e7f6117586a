"""The harvest's tables, registered once: ``campaign harvest --table NAME`` offers exactly
these (and ``all``), its ``--help`` and titles come from here, and ``run.py`` builds each
from its entry. Light on purpose (no polars): the CLI reads the names to build its parser.

A table is built from the campaign's point frame (``derive.point_frame``: one row per
completed point) by ``build`` (``module:function``), called as ``function(points)``, or
``function(points, phases)`` with ``needs_phases`` (the engines' own phase rows,
``derive.engine_phases``). Adding a table = one entry here and its function.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TableSpec:
    name: str
    help: str  # what --help says of it, a few words
    title: str  # the line printed above it on the terminal
    build: str  # "module:function" building it from the point frame
    needs_phases: bool = False  # the builder also takes the engines' phase rows
    terminal: tuple[str, ...] = ()  # the columns the terminal shows (exports carry all); () = all


_SERIES = ("platform", "trainer", "experiment", "variant", "image", "gpus", "repeats")

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
        "utilisation", "GPU/CPU utilisation of the profiler window, time shares",
        "utilisation: GPU and CPU time / total time (profiler window); compute, communication and "
        "data-wait shares of the timed window",
        "campaign.harvest.utilisation:utilisation_table"),
    TableSpec(
        "breakdown", "seconds per phase (data, forward, backward, step, comm)",
        "breakdown: seconds per phase, per run and per iteration, and share of its window",
        "campaign.harvest.utilisation:breakdown_table", needs_phases=True),
    TableSpec(
        "hardware", "MFU, all-reduce bandwidth, memory",
        "hardware: model FLOPs utilisation (achieved / peak TFLOP/s per GPU), all-reduce volume and bus "
        "bandwidth vs the interconnect, exposed communication per iteration, peak memory (medians over repeats)",
        "campaign.harvest.hardware:hardware_table",
        terminal=_SERIES + ("precision", "math", "achieved_tflops", "peak_tflops", "mfu", "allreduce_mb_per_iter",
                            "busbw_gbs", "busbw_fraction", "exposed_comm_ms", "peak_memory_gb",
                            "warmup_peak_memory_gb", "note")),
)}
TABLE_CHOICES = tuple(TABLES) + ("all",)


def table_help() -> str:
    """The --table help text: every registered table with its few words."""
    return "; ".join(f"{t.name}: {t.help}" for t in TABLES.values()) + "; all: every table"


def build_table(name: str, points, phases=None):
    """Build the registered table ``name`` from the point frame (and phase rows)."""
    import importlib

    spec = TABLES[name]
    module, func = spec.build.split(":")
    fn = getattr(importlib.import_module(module), func)
    return fn(points, phases) if spec.needs_phases else fn(points)
