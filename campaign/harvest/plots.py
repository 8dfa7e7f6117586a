"""The line figures of a harvest: training time, speedup, efficiency, throughput and
utilisation vs GPUs, and the platform comparison's grouped bars.

Each ``*_figure`` function takes harvested tables and returns a matplotlib Figure
(tests inspect its axes), drawn with the shared pieces of ``figure.py``; ``figures.py``
saves them. Projected points are drawn hollow with their interval; the ideal line is dashed.
"""

from __future__ import annotations

from typing import Optional

import polars as pl

from campaign.harvest.figure import (FIG_H, FIG_W, finish, gpu_axis, gpus_of, headroom, panels_figure, pyplot,
                                     series_lines)


def _line_figure(df: pl.DataFrame, y: str, ylabel: str, title: str, **series):
    """One panel: ``y`` of every series vs GPUs (``series``: series_lines' ideal and interval)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(FIG_W, FIG_H))
    series_lines(ax, df, y, **series)
    gpu_axis(ax, gpus_of(df))
    ax.set_ylabel(ylabel)
    headroom(ax)
    finish(fig, ax, title)
    return fig


def time_figure(scaling: pl.DataFrame):
    """Training time (time to solution) vs GPUs, with the ideal T(1)/N."""
    return _line_figure(scaling, "time_s", "training time (s)", "Training time (time to solution)",
                        ideal="ideal_time_s", ideal_label="ideal T(1)/N", lo="time_lo_s", hi="time_hi_s")


def speedup_figure(scaling: pl.DataFrame):
    """Speedup T(1)/T(N) vs GPUs, with the ideal S = N."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(FIG_W, FIG_H))
    series_lines(ax, scaling, "speedup", missing="no 1-GPU baseline")
    gpus = gpus_of(scaling)
    ax.plot(gpus, gpus, "k--", alpha=0.6, label="ideal (S = N)")
    gpu_axis(ax, gpus)
    ax.set_ylabel("speedup T(1)/T(N) (×)")
    headroom(ax)
    finish(fig, ax, "Speedup (eq. 3.1)")
    return fig


def efficiency_figure(scaling: pl.DataFrame):
    """Parallel efficiency speedup/N vs GPUs, with the ideal 1."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(FIG_W, FIG_H))
    series_lines(ax, scaling, "efficiency", scale=100.0, missing="no 1-GPU baseline")
    gpus = gpus_of(scaling)
    ax.axhline(100.0, color="k", linestyle="--", alpha=0.6, label="ideal (100 %)")
    gpu_axis(ax, gpus)
    ax.set_ylabel("parallel efficiency S/N (%)")
    ax.set_ylim(0, max(110.0, *(v * 100 + 10 for v in scaling["efficiency"].drop_nulls().to_list())))
    finish(fig, ax, "Parallel efficiency (eq. 3.2)")
    return fig


def throughput_figure(throughput: pl.DataFrame):
    """Images/s per GPU vs GPUs, with the ideal: the 1-GPU rate, constant."""
    return _line_figure(throughput, "images_per_s_per_gpu", "throughput per GPU (images/s)", "Throughput per GPU",
                        ideal="ideal_images_per_s_per_gpu", ideal_label="ideal: 1-GPU rate")


def utilisation_figure(util: pl.DataFrame):
    """GPU and CPU utilisation (profiler window) vs GPUs, side by side; absent data says so."""
    return panels_figure(util, [(col, 100.0, f"{what} utilisation ({what} time / total time, %)",
                                  f"{what} utilisation", f"no {what} utilisation recorded", 100.0)
                                 for col, what in (("gpu_util", "GPU"), ("cpu_util", "CPU"))])


def platform_comparison_figure(scaling: pl.DataFrame, util: pl.DataFrame, platforms: Optional[list[str]] = None):
    """Speedup, efficiency, GPU and CPU utilisation side by side for two (or more) platforms:
    grouped bars per GPU count. None when fewer than two platforms were measured."""
    plats = platforms or sorted(set(scaling["platform"].to_list()))
    if len(plats) < 2:
        return None
    plt = pyplot()
    merged = scaling.select(["platform", "gpus", "speedup", "efficiency"]).group_by(["platform", "gpus"]).agg(
        pl.col("speedup").median(), pl.col("efficiency").median())
    u = util.select(["platform", "gpus", "gpu_util", "cpu_util"]).group_by(["platform", "gpus"]).agg(
        pl.col("gpu_util").median(), pl.col("cpu_util").median())
    merged = merged.join(u, on=["platform", "gpus"], how="left")
    gpus = sorted(set(merged["gpus"].to_list()))
    panels = [("speedup", "speedup T(1)/T(N) (×)", 1.0), ("efficiency", "parallel efficiency (%)", 100.0),
              ("gpu_util", "GPU utilisation (%)", 100.0), ("cpu_util", "CPU utilisation (%)", 100.0)]
    fig, axes = plt.subplots(1, 4, figsize=(4 * 4.2, FIG_H))
    width = 0.8 / len(plats)
    for ax, (col, ylabel, scale) in zip(axes, panels):
        drawn = False
        for j, plat in enumerate(plats):
            vals = []
            for g in gpus:
                r = merged.filter((pl.col("platform") == plat) & (pl.col("gpus") == g))
                v = r[col][0] if r.height else None
                vals.append(float("nan") if v is None else v * scale)
                drawn |= v is not None
            xs = [i + (j - (len(plats) - 1) / 2) * width for i in range(len(gpus))]
            ax.bar(xs, vals, width=width, label=plat, color=f"C{j % 10}")
        ax.set_xticks(range(len(gpus)))
        ax.set_xticklabels([str(g) for g in gpus])
        ax.set_xlabel("GPUs (N)")
        ax.set_ylabel(ylabel)
        ax.set_title(ylabel.split(" (")[0].split(" T(")[0])
        ax.grid(True, axis="y", alpha=0.3)
        if not drawn:
            ax.text(0.5, 0.5, "not recorded", ha="center", va="center", transform=ax.transAxes)
        ax.legend(fontsize="small")
    fig.suptitle("Platform comparison: " + " vs ".join(plats))
    fig.tight_layout()
    return fig
