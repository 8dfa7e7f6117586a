"""The pieces every harvest figure is drawn with: one size, matplotlib's Agg backend
(imported only when a figure is drawn), series labelled by what differs between them,
an x axis of GPUs or of another swept variable (``xaxis.py``: it also says what makes a
series), one line per series (projected points hollow with their interval, ideal
lines dashed), panels side by side, and the campaign's label above the figure.

``plots.py`` (line figures) and ``plots_bars.py`` (bar figures) both draw with these
and import nothing of each other; ``figures.py`` draws and saves them all.
"""

from __future__ import annotations

from typing import Optional, Sequence

import polars as pl

from campaign.harvest.views import SERIES
from campaign.harvest.xaxis import GPUS, NODES, PER_NODE, XAxis, axis_frame, draw_axis

FIG_W, FIG_H = 6.4, 4.4


def pyplot():
    """matplotlib.pyplot on the Agg backend (no display needed), imported on first use."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    # Labels hold the store's text (platform, trainer, campaign names: whoever wrote the
    # store chose them): drawn literally, never parsed as mathtext (a "$\\sqrt{$" ended the drawing)
    matplotlib.rcParams["text.parse_math"] = False
    import matplotlib.pyplot as plt

    return plt


def _part(name: str, value) -> str:
    """One key's share of a series label."""
    plural = "" if str(value) == "1" else "s"
    if name == NODES:  # intra- vs inter-node series
        return f"{value} node{plural}"
    if name == GPUS:
        return f"{value} GPU{plural}"
    if name == PER_NODE:
        return f"{value} GPU{plural}/node"
    if name == "image":
        return f"image {value or 'none'}"
    if name in ("platform", "trainer", "experiment", "dataset", "variant"):
        return str(value) if value else ""
    return f"{name}={value}" if value is not None and value != "" else ""  # a varying override


def _variant_parts(variant) -> dict[str, Optional[str]]:
    """A series' ``variant`` (its varying overrides, ``trainer.params.mode=train ...``) as
    key -> value, one entry an override (a word without ``=``: itself -> None)."""
    out: dict[str, Optional[str]] = {}
    for part in str(variant or "").split():
        key, eq, value = part.partition("=")
        out[key] = value if eq else None
    return out


def _short(keys: Sequence[str]) -> dict[str, str]:
    """Each override key by its last part (``mode`` for ``trainer.params.mode``) where no other
    of ``keys`` ends the same, else whole."""
    last = [k.rsplit(".", 1)[-1] for k in keys]
    return {k: (t if last.count(t) == 1 else k) for k, t in zip(keys, last)}


def series_labels(df: pl.DataFrame, keys: Sequence[str] = SERIES) -> dict[tuple, str]:
    """Series key (the values of ``keys``) -> legend label naming only what differs
    between the series (a container image as ``image <short sha256>``, ``image none``
    without one; of a ``variant``, the overrides whose values differ, each by its key's last
    part: ``mode=train``); labels are unique (one legend entry per series)."""
    keys = [k for k in keys if k in df.columns]  # a frame of an older store may lack one (dataset)
    rows = df.select(keys).unique(maintain_order=True).rows()
    varying = [i for i, _ in enumerate(keys) if len({k[i] for k in rows}) > 1] or [0]
    v = keys.index("variant") if "variant" in keys else None
    parts = {k: _variant_parts(k[v]) for k in rows} if v is not None else {}
    over = list(dict.fromkeys(o for p in parts.values() for o in p))
    differ = [o for o in over if len({p.get(o, "=") for p in parts.values()}) > 1]  # "=": no such override
    short = _short(differ)

    def named(k: tuple) -> str:
        out = []
        for i in varying:
            if i == v:
                out += [o if parts[k][o] is None else f"{short[o]}={parts[k][o]}" for o in differ if o in parts[k]]
            elif word := _part(keys[i], k[i]):
                out.append(word)
        return " ".join(out)

    out = {k: named(k) or str(k[0]) for k in rows}
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

    from campaign.store.typed import is_date

    parts = [str(campaign["name"])] if campaign.get("name") else []
    parts.append(f"campaign {campaign['id']}")
    if is_date(campaign.get("created_at")):  # a store's number beyond any date is left out
        parts.append(time.strftime("%Y-%m-%d", time.localtime(float(campaign["created_at"]))))
    return " · ".join(parts)


def lay_out(fig) -> None:
    """``fig.tight_layout()`` above a legend the figure has below its axes (``legend``), and
    nothing left to lay out again: tight_layout leaves the figure a placeholder layout engine,
    and on a figure with an engine every savefig draws it once unseen before drawing it (a PNG
    and an SVG: four draws of every text, not two)."""
    bottom = max((leg.get_window_extent(fig.canvas.get_renderer()).height / fig.bbox.height
                  for leg in fig.legends), default=0.0)
    fig.tight_layout(rect=(0, min(bottom, 0.8), 1, 1))
    fig.set_layout_engine(None)


LEGEND_SHORT = (6, 45)  # entries, characters: a legend this small stays inside its axes
LEGEND_WRAP = 64  # characters a line of a legend below the axes holds


def legend(fig, axes: Sequence) -> None:
    """The legend of ``axes`` (panels of the same series): inside each while it is short and
    few, else once, below them across the figure, its labels wrapped and the figure made
    taller by its lines (a whole campaign's series can each name several overrides, and a
    legend inside the axes then covered the lines and ran off the figure)."""
    labelled = [ax for ax in axes if ax.get_legend_handles_labels()[0]]
    if not labelled:
        return
    handles, labels = labelled[0].get_legend_handles_labels()
    if len(labels) <= LEGEND_SHORT[0] and max(map(len, labels)) <= LEGEND_SHORT[1]:
        for ax in labelled:
            ax.legend(fontsize="small")
        return
    import textwrap

    wrapped = [textwrap.fill(label, LEGEND_WRAP, subsequent_indent="  ") for label in labels]
    lines = sum(w.count("\n") + 1 for w in wrapped)
    width, height = fig.get_size_inches()
    fig.set_size_inches(width, height + 0.16 * lines + 0.2)
    fig.legend(handles, wrapped, loc="lower center", fontsize="small", frameon=False)


def stamp(fig, label: Optional[str]) -> None:
    """Put the campaign's label above the figure (under a suptitle it has)."""
    if not label:
        return
    old = fig.get_suptitle()
    fig.suptitle(f"{old}\n{label}" if old else label, fontsize="medium" if old else "small")
    from matplotlib.layout_engine import ConstrainedLayoutEngine

    if not isinstance(fig.get_layout_engine(), ConstrainedLayoutEngine):
        lay_out(fig)  # room above the axes for the suptitle (constrained layout makes its own)


def gpu_axis(ax, gpus: list[int]) -> None:
    """The x axis of GPU counts: log 2, one tick per count measured, a grid."""
    ax.set_xscale("log", base=2)
    ax.set_xticks(gpus)
    ax.set_xticklabels([str(g) for g in gpus])
    ax.minorticks_off()
    if gpus:
        ax.set_xlim(min(gpus) / 1.25, max(gpus) * 1.25)
    ax.set_xlabel("GPUs (N)")
    ax.grid(True, alpha=0.3)


def series_lines(ax, df: pl.DataFrame, y: str, *, ideal: Optional[str] = None, ideal_label: str = "ideal",
                 lo: Optional[str] = None, hi: Optional[str] = None, scale: float = 1.0,
                 missing: str = "no value", x: str = GPUS) -> XAxis:
    """One line per series against ``x`` (xaxis.py), one legend entry each (a series
    without any value of ``y`` too, saying ``missing``); projected points hollow, under
    one neutral legend entry; the ideal only against GPUs (it is a function of N).
    Returns the axis drawn against (``draw_axis`` puts its ticks)."""
    df, axis = axis_frame(df, x)
    if not axis.is_gpus:
        ideal = None
    labels = series_labels(df, axis.series)
    ideal_labelled = projected_labelled = False
    for i, (key, label) in enumerate(labels.items()):
        s = df.filter(pl.all_horizontal([pl.col(k).eq_missing(v) for k, v in zip(axis.series, key)]))
        s = s.filter(pl.col(y).is_not_null() & pl.col(x).is_not_null())
        s = s.with_columns(pl.Series("_x", axis.positions(s[x].to_list()), dtype=pl.Float64)).sort("_x")
        color = f"C{i % 10}"
        if s.height == 0:  # named all the same, so the legend lists every series
            ax.plot([], [], marker="o", linestyle="none", color=color, alpha=0.4, label=f"{label} ({missing})")
            continue
        xs, yv = s["_x"].to_list(), [v * scale for v in s[y].to_list()]
        flags = s["projected"].fill_null(False).to_list() if "projected" in s.columns else [False] * s.height
        ax.plot(xs, yv, marker="o", color=color, label=label, markevery=[i for i, f in enumerate(flags) if not f])
        if "projected" in s.columns and s["projected"].any():
            p = s.filter(pl.col("projected"))
            px, py = p["_x"].to_list(), [v * scale for v in p[y].to_list()]
            ax.plot(px, py, "o", markerfacecolor="white", color=color)
            projected_labelled = True
            if lo and hi and p[lo].null_count() == 0:
                err = [[a - b * scale for a, b in zip(py, p[lo].to_list())],
                       [b * scale - a for a, b in zip(py, p[hi].to_list())]]
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
    return axis


def headroom(ax) -> None:
    """Start the y axis at 0 and leave room above the data for the legend."""
    ax.set_ylim(0, ax.get_ylim()[1] * 1.18)


def finish(fig, ax, title: str) -> None:
    """Title the axes, draw the legend when something is labelled, and lay the figure out."""
    ax.set_title(title)
    legend(fig, [ax])
    lay_out(fig)


def gpus_of(df: pl.DataFrame) -> list[int]:
    """The GPU counts of a table, sorted."""
    return sorted(set(df["gpus"].to_list()))


def panels_figure(df: pl.DataFrame, panels: Sequence[tuple[str, float, str, str, str, Optional[float]]]):
    """Panels side by side, each ``(column, scale, y label, title, text when no point has the
    column, y limit then)``: the column of every series vs GPUs."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(len(panels) * FIG_W, FIG_H))
    gpus = gpus_of(df)
    for ax, (col, scale, ylabel, title, missing, missing_ylim) in zip(axes, panels):
        if df[col].null_count() == df.height:
            ax.text(0.5, 0.5, missing, ha="center", va="center", transform=ax.transAxes)
            if missing_ylim is not None:
                ax.set_ylim(0, missing_ylim)
        else:
            series_lines(ax, df, col, scale=scale)
            headroom(ax)
        gpu_axis(ax, gpus)
        ax.set_ylabel(ylabel)
        ax.set_title(title)
    legend(fig, axes)
    lay_out(fig)
    return fig
