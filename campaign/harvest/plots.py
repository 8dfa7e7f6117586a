"""The line figures of a harvest: training time, speedup, efficiency and throughput vs
GPUs or another swept variable (``x``: xaxis.py), utilisation vs GPUs, and the platform
comparison's grouped bars.

Each ``*_figure`` function takes harvested tables and returns a matplotlib Figure
(tests inspect its axes), drawn with the shared pieces of ``figure.py``; ``figures.py``
saves them. Projected points are drawn hollow with their interval; the ideal line is dashed.
"""

from __future__ import annotations

from typing import Optional

import polars as pl

from campaign.harvest.figure import FIG_H, FIG_W, finish, headroom, lay_out, panels_figure, pyplot, series_lines
from campaign.harvest.study_style import PLAIN, FigureStyle
from campaign.harvest.xaxis import GPUS, draw_axis
from campaign.harvest.views import with_placement


def _line_figure(df: pl.DataFrame, y: str, ylabel: str, title: str, **series):
    """One panel: ``y`` of every series vs ``x`` (``series``: series_lines' x, ideal and interval)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(FIG_W, FIG_H))
    draw_axis(ax, series_lines(ax, df, y, **series))
    ax.set_ylabel(ylabel)
    headroom(ax)
    finish(fig, ax, title)
    return fig


def time_figure(scaling: pl.DataFrame, x: str = GPUS, style: FigureStyle = PLAIN):
    """Training time (time to solution) vs ``x``, with the ideal T(1)/N against GPUs, in the
    study's unit (``style``: study_style.py)."""
    return _line_figure(scaling, "time_s", f"training time ({style.time_unit})", style.time_title, x=x,
                        ideal="ideal_time_s", ideal_label="ideal T(1)/N", lo="time_lo_s", hi="time_hi_s",
                        scale=style.time_scale)


def epoch_time_figure(scaling: pl.DataFrame, x: str = GPUS):
    """Mean time per epoch over all epochs vs ``x``: the ViT study's y (its Figs 8, 9, 16, 17;
    section IV-A: "trained for 5 epochs ... and averaged when plotting the results (time in
    seconds)"; harvest/epochs.py); None when no point timed an epoch."""
    if "epoch_s" not in scaling.columns or scaling["epoch_s"].null_count() == scaling.height:
        return None
    return _line_figure(scaling, "epoch_s", "time per epoch (s, mean over all epochs)",
                        "Time per epoch (mean over all epochs)", x=x)


def speedup_figure(scaling: pl.DataFrame, x: str = GPUS, style: FigureStyle = PLAIN):
    """Speedup T(1)/T(N) vs ``x``, with the ideal S = N against GPUs."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(FIG_W, FIG_H))
    axis = series_lines(ax, scaling, "speedup", missing="no 1-GPU baseline", x=x)
    if axis.is_gpus:
        ax.plot(list(axis.values), list(axis.values), "k--", alpha=0.6, label="ideal (S = N)")
    draw_axis(ax, axis)
    ax.set_ylabel("speedup T(1)/T(N) (×)")
    headroom(ax)
    finish(fig, ax, style.speedup_title)
    return fig


def efficiency_figure(scaling: pl.DataFrame, x: str = GPUS, style: FigureStyle = PLAIN):
    """Parallel efficiency speedup/N vs ``x``, with the ideal 1."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(FIG_W, FIG_H))
    axis = series_lines(ax, scaling, "efficiency", scale=100.0, missing="no 1-GPU baseline", x=x)
    ax.axhline(100.0, color="k", linestyle="--", alpha=0.6, label="ideal (100 %)")
    draw_axis(ax, axis)
    ax.set_ylabel("parallel efficiency S/N (%)")
    # a list, not max(110.0, *values): with no efficiency at all (no T(1) of the same work
    # in any series) that is max(110.0), which raises
    ax.set_ylim(0, max([110.0, *(v * 100 + 10 for v in scaling["efficiency"].drop_nulls().to_list())]))
    finish(fig, ax, style.efficiency_title)
    return fig


def throughput_figure(throughput: pl.DataFrame, x: str = GPUS):
    """Images/s per GPU vs ``x``, with the ideal against GPUs: the 1-GPU rate, constant."""
    return _line_figure(throughput, "images_per_s_per_gpu", "throughput per GPU (images/s)", "Throughput per GPU", x=x,
                        ideal="ideal_images_per_s_per_gpu", ideal_label="ideal: 1-GPU rate")


def utilisation_figure(util: pl.DataFrame):
    """GPU and CPU utilisation (profiler window) vs GPUs, side by side; absent data says so."""
    return panels_figure(util, [(col, 100.0, f"{what} utilisation ({what} time / total time, %)",
                                  f"{what} utilisation", f"no {what} utilisation recorded", 100.0)
                                 for col, what in (("gpu_util", "GPU"), ("cpu_util", "CPU"))])


def utilisation_study_figure(util: pl.DataFrame):
    """The reference study's Figures 4-5 its own way: GPU and CPU utilisation by its eq. 3.3
    (device time, or CPU time, over CPU plus device time of the profiled window: the two add
    up to 100 %), beside which ``utilisation_figure`` draws the physical reading."""
    return panels_figure(util, [(col, 100.0, f"{what} utilisation, eq. 3.3 (%)\n{what} time / (CPU + GPU time)",
                                  f"{what} utilisation (eq. 3.3, Figure {fig})", f"no {what} time to divide (eq. 3.3)",
                                  100.0)
                                 for col, what, fig in (("gpu_util_study", "GPU", 4), ("cpu_util_study", "CPU", 5))])


COMPARISON_UTIL = ("gpu_util_study", "cpu_util_study")  # eq. 3.3 (utilisation.study_utilisation)
# the platform comparison's panels: (column, y label, scale), here and in campaign.report.svg
COMPARISON_PANELS = (("speedup", "speedup T(1)/T(N) (×)", 1.0), ("efficiency", "parallel efficiency (%)", 100.0),
                     ("gpu_util_study", "GPU utilisation, eq. 3.3 (%)", 100.0),
                     ("cpu_util_study", "CPU utilisation, eq. 3.3 (%)", 100.0))


def platform_comparison_data(scaling: pl.DataFrame, util: pl.DataFrame) -> pl.DataFrame:
    """Per platform and placement: the median over the platform's series of speedup,
    efficiency, GPU and CPU utilisation (the platform comparison's bars, here and in
    campaign.report.svg: one computation, the same numbers). 4 GPUs on one node and on two
    (1x4, 2x2) are two bars, never one median (views.py's rule); ``where`` names the bar's
    place on the axis: the GPU count on one node, nodes x GPUs per node across nodes."""
    key = ["platform", "gpus", "placement"]
    s, u = with_placement(scaling), with_placement(util)
    merged = s.select([*key, "speedup", "efficiency"]).group_by(key).agg(
        pl.col("speedup").median(), pl.col("efficiency").median())
    # the reference study's Figs 6-8 panels are its eq. 3.3 (section 5.4: "platform comparison
    # figures are made containing speedup, parallel efficiency, GPU utilization, and CPU
    # utilization metrics", the metrics of its section 5.3, Figs 4-5), not the physical reading
    util_cols = [c for c in COMPARISON_UTIL if c in u.columns]
    u = u.select([*key, *util_cols]).group_by(key).agg(*[pl.col(c).median() for c in util_cols])
    out = merged.join(u, on=key, how="left")
    one_node = pl.col("placement").str.starts_with("1x")
    return out.with_columns(pl.when(one_node).then(pl.col("gpus").cast(pl.Utf8)).otherwise(pl.col("placement"))
                            .alias("where")).sort(["gpus", pl.col("placement").str.split("x").list.first()
                                                   .cast(pl.Int64), "platform"])  # one order: the group-by's is none


def comparison_axis(merged: pl.DataFrame) -> tuple[list[str], str]:
    """The bars' places (``where``, GPU count then nodes) and the axis label."""
    wheres = list(dict.fromkeys(merged["where"].to_list()))
    across = any("x" in w for w in wheres)
    return wheres, "GPUs (N), or nodes x GPUs per node" if across else "GPUs (N)"


def platform_comparison_figure(scaling: pl.DataFrame, util: pl.DataFrame, platforms: Optional[list[str]] = None):
    """Speedup, efficiency, GPU and CPU utilisation side by side for two (or more) platforms:
    grouped bars per GPU count. None when fewer than two platforms were measured."""
    plats = platforms or sorted(set(scaling["platform"].to_list()))
    if len(plats) < 2:
        return None
    plt = pyplot()
    merged = platform_comparison_data(scaling, util)
    wheres, xlabel = comparison_axis(merged)
    panels = COMPARISON_PANELS
    fig, axes = plt.subplots(1, 4, figsize=(4 * 4.2, FIG_H))
    width = 0.8 / len(plats)
    for ax, (col, ylabel, scale) in zip(axes, panels):
        drawn = False
        for j, plat in enumerate(plats):
            vals = []
            for g in wheres:
                r = merged.filter((pl.col("platform") == plat) & (pl.col("where") == g))
                v = r[col][0] if r.height and col in r.columns else None
                vals.append(float("nan") if v is None else v * scale)
                drawn |= v is not None
            xs = [i + (j - (len(plats) - 1) / 2) * width for i in range(len(wheres))]
            ax.bar(xs, vals, width=width, label=plat, color=f"C{j % 10}")
        ax.set_xticks(range(len(wheres)))
        ax.set_xticklabels(wheres)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(ylabel.split(" (")[0].split(" T(")[0])
        ax.grid(True, axis="y", alpha=0.3)
        if not drawn:
            ax.text(0.5, 0.5, "not recorded (CPU ranks: no device time)" if col in COMPARISON_UTIL else "not recorded",
                    ha="center", va="center", transform=ax.transAxes, wrap=True)
        ax.legend(fontsize="small")
    fig.suptitle("Platform comparison: " + " vs ".join(plats))
    lay_out(fig)
    return fig
