"""Figures of a harvest (matplotlib, Agg backend, imported only when a figure is drawn).

Each ``*_figure`` function takes harvested tables and returns a matplotlib Figure
(tests inspect its axes); ``write_figures`` saves them as PNG and SVG. Projected
points are drawn hollow with their interval; the ideal line is dashed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

import polars as pl

from campaign.errors import ConfigError
from campaign.harvest.views import SERIES

FIG_W, FIG_H = 6.4, 4.4


def _plt():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _labels(df: pl.DataFrame) -> dict[tuple, str]:
    """Series key -> legend label naming only what differs between the series (a
    container image as ``image <short sha256>``, ``image none`` without one); labels
    are unique (one legend entry per series)."""
    keys = df.select(SERIES).unique(maintain_order=True).rows()
    varying = [i for i, _ in enumerate(SERIES) if len({k[i] for k in keys}) > 1] or [0]

    def part(name: str, value) -> str:
        if name == "nodes":  # intra- vs inter-node series
            return f"{value} node{'' if str(value) == '1' else 's'}"
        return f"image {value or 'none'}" if name == "image" else (str(value) if value else "")

    out = {k: " ".join(p for i in varying if (p := part(SERIES[i], k[i]))) or str(k[0]) for k in keys}
    seen: dict[str, int] = {}
    for k, label in out.items():  # two series one label would name (a key's value empty in one of them)
        seen[label] = seen.get(label, 0) + 1
        if seen[label] > 1:
            out[k] = f"{label} ({seen[label]})"
    return out


def campaign_label(campaign: Optional[dict]) -> Optional[str]:
    """``main-job · campaign 20261124-011044-b4bb · 2026-11-24``: what every figure says it shows."""
    if not campaign:
        return None
    import time

    parts = [str(campaign["name"])] if campaign.get("name") else []
    parts.append(f"campaign {campaign['id']}")
    if campaign.get("created_at"):
        parts.append(time.strftime("%Y-%m-%d", time.localtime(float(campaign["created_at"]))))
    return " · ".join(parts)


def _stamp(fig, label: Optional[str]) -> None:
    """Put the campaign's label above the figure (under a suptitle it has)."""
    if not label:
        return
    old = fig.get_suptitle()
    fig.suptitle(f"{old}\n{label}" if old else label, fontsize="medium" if old else "small")
    from matplotlib.layout_engine import ConstrainedLayoutEngine

    if not isinstance(fig.get_layout_engine(), ConstrainedLayoutEngine):
        fig.tight_layout()  # room above the axes for the suptitle (constrained layout makes its own)


def _gpu_axis(ax, gpus: list[int]) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(gpus)
    ax.set_xticklabels([str(g) for g in gpus])
    ax.minorticks_off()
    if gpus:
        ax.set_xlim(min(gpus) / 1.25, max(gpus) * 1.25)
    ax.set_xlabel("GPUs (N)")
    ax.grid(True, alpha=0.3)


def _series_lines(ax, df: pl.DataFrame, y: str, *, ideal: Optional[str] = None, ideal_label: str = "ideal",
                  lo: Optional[str] = None, hi: Optional[str] = None, scale: float = 1.0,
                  missing: str = "no value") -> None:
    """One line per series, one legend entry each (a series without any value of ``y``
    too, saying ``missing``); projected points hollow, under one neutral legend entry."""
    labels = _labels(df)
    ideal_labelled = projected_labelled = False
    for i, (key, label) in enumerate(labels.items()):
        s = df.filter(pl.all_horizontal([pl.col(k).eq_missing(v) for k, v in zip(SERIES, key)])).sort("gpus")
        s = s.filter(pl.col(y).is_not_null())
        color = f"C{i % 10}"
        if s.height == 0:  # named all the same, so the legend lists every series
            ax.plot([], [], marker="o", linestyle="none", color=color, alpha=0.4, label=f"{label} ({missing})")
            continue
        x, yv = s["gpus"].to_list(), [v * scale for v in s[y].to_list()]
        flags = s["projected"].fill_null(False).to_list() if "projected" in s.columns else [False] * s.height
        ax.plot(x, yv, marker="o", color=color, label=label, markevery=[i for i, f in enumerate(flags) if not f])
        if "projected" in s.columns and s["projected"].any():
            p = s.filter(pl.col("projected"))
            px, py = p["gpus"].to_list(), [v * scale for v in p[y].to_list()]
            ax.plot(px, py, "o", markerfacecolor="white", color=color)
            projected_labelled = True
            if lo and hi and p[lo].null_count() == 0:
                err = [[a - b * scale for a, b in zip(py, p[lo].to_list())], [b * scale - a for a, b in zip(py, p[hi].to_list())]]
                ax.errorbar(px, py, yerr=err, fmt="none", ecolor=color, capsize=3)
        if ideal is not None and ideal in s.columns:
            iv = s.filter(pl.col(ideal).is_not_null())
            if iv.height:
                ax.plot(iv["gpus"].to_list(), [v * scale for v in iv[ideal].to_list()], "--", color=color, alpha=0.6)
                ideal_labelled = True
    if ideal_labelled:  # one neutral legend entry for every series' dashed ideal
        ax.plot([], [], "--", color="gray", label=ideal_label)
    if projected_labelled:  # and one for every series' projected (hollow) points
        ax.plot([], [], "o", markerfacecolor="white", color="gray", label="projected (hollow)")


def _headroom(ax) -> None:
    """Start the y axis at 0 and leave room above the data for the legend."""
    ax.set_ylim(0, ax.get_ylim()[1] * 1.18)


def _finish(fig, ax, title: str) -> None:
    ax.set_title(title)
    handles, _ = ax.get_legend_handles_labels()
    if handles:
        ax.legend(fontsize="small")
    fig.tight_layout()


def _gpus(df: pl.DataFrame) -> list[int]:
    return sorted(set(df["gpus"].to_list()))


def _line_figure(df: pl.DataFrame, y: str, ylabel: str, title: str, **series):
    """One panel: ``y`` of every series vs GPUs (``series``: _series_lines' ideal and interval)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(FIG_W, FIG_H))
    _series_lines(ax, df, y, **series)
    _gpu_axis(ax, _gpus(df))
    ax.set_ylabel(ylabel)
    _headroom(ax)
    _finish(fig, ax, title)
    return fig


def time_figure(scaling: pl.DataFrame):
    """Training time (time to solution) vs GPUs, with the ideal T(1)/N."""
    return _line_figure(scaling, "time_s", "training time (s)", "Training time (time to solution)",
                        ideal="ideal_time_s", ideal_label="ideal T(1)/N", lo="time_lo_s", hi="time_hi_s")


def speedup_figure(scaling: pl.DataFrame):
    """Speedup T(1)/T(N) vs GPUs, with the ideal S = N."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(FIG_W, FIG_H))
    _series_lines(ax, scaling, "speedup", missing="no 1-GPU baseline")
    gpus = _gpus(scaling)
    ax.plot(gpus, gpus, "k--", alpha=0.6, label="ideal (S = N)")
    _gpu_axis(ax, gpus)
    ax.set_ylabel("speedup T(1)/T(N) (×)")
    _headroom(ax)
    _finish(fig, ax, "Speedup (eq. 3.1)")
    return fig


def efficiency_figure(scaling: pl.DataFrame):
    """Parallel efficiency speedup/N vs GPUs, with the ideal 1."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(FIG_W, FIG_H))
    _series_lines(ax, scaling, "efficiency", scale=100.0, missing="no 1-GPU baseline")
    gpus = _gpus(scaling)
    ax.axhline(100.0, color="k", linestyle="--", alpha=0.6, label="ideal (100 %)")
    _gpu_axis(ax, gpus)
    ax.set_ylabel("parallel efficiency S/N (%)")
    ax.set_ylim(0, max(110.0, *(v * 100 + 10 for v in scaling["efficiency"].drop_nulls().to_list())))
    _finish(fig, ax, "Parallel efficiency (eq. 3.2)")
    return fig


def throughput_figure(throughput: pl.DataFrame):
    """Images/s per GPU vs GPUs, with the ideal: the 1-GPU rate, constant."""
    return _line_figure(throughput, "images_per_s_per_gpu", "throughput per GPU (images/s)", "Throughput per GPU",
                        ideal="ideal_images_per_s_per_gpu", ideal_label="ideal: 1-GPU rate")


def _panels_figure(df: pl.DataFrame, panels: Sequence[tuple[str, float, str, str, str, Optional[float]]]):
    """Panels side by side, each ``(column, scale, y label, title, text when no point has the
    column, y limit then)``: the column of every series vs GPUs."""
    plt = _plt()
    fig, axes = plt.subplots(1, len(panels), figsize=(len(panels) * FIG_W, FIG_H))
    gpus = _gpus(df)
    for ax, (col, scale, ylabel, title, missing, missing_ylim) in zip(axes, panels):
        if df[col].null_count() == df.height:
            ax.text(0.5, 0.5, missing, ha="center", va="center", transform=ax.transAxes)
            if missing_ylim is not None:
                ax.set_ylim(0, missing_ylim)
        else:
            _series_lines(ax, df, col, scale=scale)
            _headroom(ax)
        _gpu_axis(ax, gpus)
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize="small")
    fig.tight_layout()
    return fig


def utilisation_figure(util: pl.DataFrame):
    """GPU and CPU utilisation (profiler window) vs GPUs, side by side; absent data says so."""
    return _panels_figure(util, [(col, 100.0, f"{what} utilisation ({what} time / total time, %)",
                                  f"{what} utilisation", f"no {what} utilisation recorded", 100.0)
                                 for col, what in (("gpu_util", "GPU"), ("cpu_util", "CPU"))])


def platform_comparison_figure(scaling: pl.DataFrame, util: pl.DataFrame, platforms: Optional[list[str]] = None):
    """Speedup, efficiency, GPU and CPU utilisation side by side for two (or more) platforms:
    grouped bars per GPU count. None when fewer than two platforms were measured."""
    plats = platforms or sorted(set(scaling["platform"].to_list()))
    if len(plats) < 2:
        return None
    plt = _plt()
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


def write_figures(out_dir: str | Path, scaling: pl.DataFrame, throughput: pl.DataFrame, util: pl.DataFrame,
                  other: Optional[tuple[pl.DataFrame, pl.DataFrame]] = None,
                  stack: Optional[pl.DataFrame] = None, hardware: Optional[pl.DataFrame] = None,
                  placement: Optional[pl.DataFrame] = None, campaign: Optional[dict] = None) -> list[Path]:
    """Draw every figure the tables allow and save each as PNG and SVG in ``out_dir``.

    ``other``: another campaign's (scaling, utilisation) tables; its platforms join the
    platform comparison panel (drawn when two or more platforms were measured).
    ``stack``: the phase stack (``utilisation.phase_stack``) of the breakdown figure;
    ``hardware``: the hardware table (MFU and bus bandwidth figure); ``placement``: the
    intra- vs inter-node table (drawn when some point spanned nodes); ``campaign``: the
    campaign's row, whose name, id and date every figure carries above it."""
    from campaign.harvest.plots_bars import breakdown_figure, hardware_figure, placement_figure

    plt = _plt()
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot write figures to {out}: {exc.strerror}") from exc
    both_scaling, both_util = scaling, util
    if other is not None and other[0] is not None and other[0].height:
        both_scaling = pl.concat([scaling, other[0]], how="diagonal_relaxed")
        both_util = pl.concat([util, other[1]], how="diagonal_relaxed")
    figures = {
        "training_time": time_figure(scaling),
        "speedup": speedup_figure(scaling),
        "efficiency": efficiency_figure(scaling),
        "throughput": throughput_figure(throughput),
        "utilisation": utilisation_figure(util),
        "platform_comparison": platform_comparison_figure(both_scaling, both_util),
        "breakdown": breakdown_figure(stack) if stack is not None else None,
        "hardware": hardware_figure(hardware) if hardware is not None and hardware.height else None,
        "placement": placement_figure(placement) if placement is not None else None,
    }
    paths = []
    label = campaign_label(campaign)
    for name, fig in figures.items():
        if fig is None:
            continue
        _stamp(fig, label)
        for ext in ("png", "svg"):
            path = out / f"{name}.{ext}"
            fig.savefig(path, dpi=120 if ext == "png" else None)
            paths.append(path)
        plt.close(fig)
    return paths
