"""The fitted model's figures (``campaign harvest --table model --plots DIR``; docs/model.md),
drawn from the model table (campaign/harvest/model.py) alone, so what they show is what the
table says:

- ``model_fit``: per series, the fitted speedup t(1)/t(N) as a line through the table's
  GPU counts (measured and predicted), its 95 % band, the measured points (filled), the
  predictions (hollow, apart from the measurements), the ideal line N and the knee
  (the largest N whose efficiency stays above the floor) marked;
- ``model_comm``: per measured point, the communication per iteration beside its ring
  all-reduce lower bound 2(N-1)/N x bytes / bandwidth.

The reference study reads its "diminishing returns" off three or four measured speedups
(section 5, Figs 2-3); these put the fitted curve and its extrapolation beside them.
Artists carry a ``gid`` (``fit``, ``band``, ``measured``, ``predicted``, ``knee``,
``comm``, ``bound``, each ``:LABEL``) so tests read the data back, not pixels. None when
the table has nothing of the kind to draw.
"""

from __future__ import annotations

from typing import Optional

import polars as pl

from campaign.harvest.figure import FIG_W, FIG_H, finish, gpu_axis, headroom, pyplot
from campaign.harvest.model import SERIES


def series_of(df: pl.DataFrame) -> list[tuple[str, pl.DataFrame]]:
    """(label, rows sorted by N) per series of the model table, the label naming only
    the series keys that differ (the platform where none does)."""
    keys = df.select(SERIES).unique(maintain_order=True).rows()
    varying = [i for i, _ in enumerate(SERIES) if len({k[i] for k in keys}) > 1] or [0]
    out = []
    for key in keys:
        rows = df.filter(pl.all_horizontal([pl.col(c).eq_missing(v) for c, v in zip(SERIES, key)]))
        label = " ".join(str(key[i]) for i in varying if key[i]) or str(key[0])
        out.append((label, rows.sort("gpus", nulls_last=True)))
    return out


def model_fit_figure(df: pl.DataFrame) -> Optional[object]:
    """Fitted speedup with its band through the measured points, predictions hollow, the
    ideal line and the knee; None where no series was fitted."""
    fitted = df.filter(pl.col("kind") != "no fit") if df.height and "kind" in df.columns else pl.DataFrame()
    if fitted.height == 0:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(FIG_W, FIG_H))
    for i, (label, s) in enumerate(series_of(fitted)):
        color = f"C{i % 10}"
        n, speedup = s["gpus"].to_list(), s["speedup"].to_list()
        ax.plot(n, speedup, "-", color=color, label=f"{label}: fit ({s['terms'][0]})", gid=f"fit:{label}")
        band = s.filter(pl.col("speedup_lo").is_not_null() & pl.col("speedup_hi").is_not_null())
        if band.height:
            ax.fill_between(band["gpus"].to_list(), band["speedup_lo"].to_list(), band["speedup_hi"].to_list(),
                            color=color, alpha=0.18, linewidth=0, gid=f"band:{label}")
        # measured: the fitted t(1) over each measured t(N) (the table's speedup column is the fit's)
        t1 = float(s["speedup"][0] * s["fit_t_image_s"][0])
        m = s.filter(pl.col("kind") == "measured")
        ax.plot(m["gpus"].to_list(), [t1 / t for t in m["t_image_s"].to_list()], "o", color=color,
                gid=f"measured:{label}")
        p = s.filter(pl.col("kind") == "predicted")
        if p.height:
            ax.plot(p["gpus"].to_list(), p["speedup"].to_list(), "o", markerfacecolor="white", color=color,
                    gid=f"predicted:{label}")
        knee = s["knee_gpus"][0]
        if knee is not None:
            at = s.filter(pl.col("gpus") == knee)["speedup"]
            ax.plot([knee], [at[0]], "*", markersize=14, color=color, markeredgecolor="black",
                    gid=f"knee:{label}")
    gpus = sorted(set(fitted["gpus"].to_list()))
    ax.plot(gpus, gpus, "--", color="gray", label="ideal (speedup = N)", gid="ideal")
    ax.plot([], [], "o", color="gray", label="measured")
    ax.plot([], [], "o", color="gray", markerfacecolor="white", label="predicted (model)")
    ax.plot([], [], "*", color="gray", markeredgecolor="black", markersize=12, label="knee (efficiency floor)")
    gpu_axis(ax, gpus)
    ax.set_ylabel("speedup t(1)/t(N) (×), fitted")
    headroom(ax)
    finish(fig, ax, "Fitted scaling model: speedup, 95 % band, predictions")
    return fig


def model_comm_figure(df: pl.DataFrame) -> Optional[object]:
    """Measured communication per iteration beside its ring all-reduce bound, per measured
    point; None where no point has both."""
    if df.height == 0 or "comm_bound_ms" not in df.columns:
        return None
    rows = df.filter((pl.col("kind") == "measured") & pl.col("comm_bound_ms").is_not_null()
                     & pl.col("comm_ms").is_not_null())
    if rows.height == 0:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(FIG_W, FIG_H))
    for i, (label, s) in enumerate(series_of(rows)):
        color = f"C{i % 10}"
        ax.plot(s["gpus"].to_list(), s["comm_ms"].to_list(), "o-", color=color, label=f"{label}: measured",
                gid=f"comm:{label}")
        ax.plot(s["gpus"].to_list(), s["comm_bound_ms"].to_list(), "s--", color=color, alpha=0.7,
                label=f"{label}: ring bound 2(N-1)/N·bytes/bw", gid=f"bound:{label}")
    gpu_axis(ax, sorted(set(rows["gpus"].to_list())))
    ax.set_ylabel("communication per iteration (ms)")
    headroom(ax)
    finish(fig, ax, "Communication against its ring all-reduce bound")
    return fig
