"""The bar figures of a harvest: the phase breakdown, the hardware (MFU and bus
bandwidth) and intra- vs inter-node placement, drawn with the shared pieces of
``figure.py`` (``plots.py`` draws the line figures, ``figures.py`` saves them all)."""

from __future__ import annotations

import polars as pl

from campaign.harvest.figure import FIG_H, FIG_W, finish, headroom, panels_figure, pyplot, series_labels
from campaign.harvest.xaxis import GPUS, axis_frame
from campaign.harvest.study_timing import STUDY_TITLE, is_study_stack


_GROUP_GAP = 0.6  # blank bar widths between the bars of two series
_CHAR_IN = 0.075  # inches a character of matplotlib's "small" text takes, about (DejaVu Sans)
# One colour per stacked phase, the same in every bar and every figure (utilisation.STACK_PHASES).
_PHASE_COLORS = {"data": "C7", "forward": "C0", "backward": "C8", "backward_compute": "C2", "comm_exposed": "C3",
                 "comm_marked": "C1", "step": "C4", "train_step": "C5",
                 "study.compute": "C0", "study.comm_barrier": "C3", "study.comm_sync": "C3"}


def _order(value) -> tuple:
    """Sort key of one series value: numbers by value, then names, absent last (as polars sorts)."""
    if value is None:
        return (2, 0, "")
    return (0, value, "") if isinstance(value, (int, float)) else (1, 0, str(value))


def breakdown_figure(stack: pl.DataFrame, x: str = GPUS):
    """Where an iteration's time goes: per series and value of ``x`` (GPU count by
    default; xaxis.py) one bar stacking the mean seconds per iteration of the disjoint
    phases (``utilisation.phase_stack``: computation and communication apart), with the
    measured iteration as a black tick. A phase a run did not record is not drawn (no
    zero-height segment); without any phase the figure says so."""
    plt = pyplot()
    bars = stack.filter(pl.col("phase") != "iteration") if stack.height else stack
    if bars.height == 0:
        fig, ax = plt.subplots(figsize=(FIG_W, FIG_H))
        ax.text(0.5, 0.5, "no breakdown recorded", ha="center", va="center", transform=ax.transAxes)
        ax.set_xticks([])
        ax.set_yticks([])
        finish(fig, ax, "Where an iteration's time goes")
        return fig
    stack, axis = axis_frame(stack, x)
    bars = stack.filter(pl.col("phase") != "iteration")
    on = list(axis.series) + [x]
    keys = sorted(stack.select(on).unique(maintain_order=True).rows(),
                  key=lambda k: (tuple(_order(v) for v in k[:-1]), axis.position(k[-1])))
    labels = series_labels(stack, axis.series)
    series = list(dict.fromkeys(k[:-1] for k in keys))
    xs_all = [i + _GROUP_GAP * series.index(k[:-1]) for i, k in enumerate(keys)]  # a gap between series
    at = {k: i for i, k in enumerate(keys)}

    def bar_index(df: pl.DataFrame) -> list[int]:
        return [at[k] for k in df.select(on).rows()]

    many = len(series) > 1
    # inches an x unit (a bar and its share of the gaps) takes: 0.8, or what a group of one bar
    # needs to hold the longest word of its series' label under it in one line
    words = [w for s in series for w in labels[s].split()] if many else []
    unit = max(0.8, (max(map(len, words), default=0) + 1) * _CHAR_IN / (1 + _GROUP_GAP))
    # constrained layout: room for the legend beside the bars, however many bars there are
    fig, ax = plt.subplots(figsize=(max(3.0, unit * xs_all[-1] + 2.4) + 3.4, FIG_H), layout="constrained")
    top = [0.0] * len(keys)  # ms stacked so far on each bar
    for _, phase, label in bars.select("order", "phase", "label").unique().sort("order").rows():
        seg = bars.filter(pl.col("phase") == phase)
        idx, ms = bar_index(seg), [v * 1000.0 for v in seg["per_iteration_s"].to_list()]
        ax.bar([xs_all[i] for i in idx], ms, width=0.6, bottom=[top[i] for i in idx], label=label,
               color=_PHASE_COLORS.get(phase, "C9"), edgecolor="white", linewidth=0.5)
        for i, m in zip(idx, ms):
            top[i] += m
    it = stack.filter(pl.col("phase") == "iteration")
    it_ms = [v * 1000.0 for v in it["per_iteration_s"].to_list()]
    if it.height:
        ax.plot([xs_all[i] for i in bar_index(it)], it_ms, linestyle="none", marker="_", markersize=28,
                markeredgewidth=2, color="black", label="iteration (measured)")
    ax.set_xticks(xs_all)
    ax.set_xticklabels([str(k[-1]) for k in keys])
    ax.set_xlim(-0.6, xs_all[-1] + 0.6)
    if many:  # each series named once, under its bars, wrapped to its group's width
        import textwrap

        groups = ax.secondary_xaxis("bottom")
        centers = [sum(x for x, k in zip(xs_all, keys) if k[:-1] == s) / sum(k[:-1] == s for k in keys) for s in series]
        width = [sum(k[:-1] == s for k in keys) for s in series]
        groups.set_xticks(centers, ["\n".join(textwrap.wrap(labels[s], int((n + _GROUP_GAP) * unit / _CHAR_IN) - 1,
                                                           break_long_words=False, break_on_hyphens=False))
                                    for s, n in zip(series, width)], fontsize="small")
        groups.tick_params(length=0, pad=16)
        groups.spines["bottom"].set_visible(False)
        groups.set_xlabel(f"{axis.label}, per series")
    else:
        ax.set_xlabel(axis.label)
    ax.set_ylabel("time per iteration (ms)")
    ax.grid(True, axis="y", alpha=0.3)
    ax.set_ylim(0, max(top + it_ms) * 1.05)
    title = STUDY_TITLE if is_study_stack(stack) else "Where an iteration's time goes"
    ax.set_title(title + ("" if many else f": {labels[keys[0][:-1]]}"))
    handles = ax.lines[:1] + list(ax.containers)[::-1]  # the total, then the stack from its top
    ax.legend(handles, [h.get_label() for h in handles], fontsize="small", loc="upper left", bbox_to_anchor=(1.02, 1.0),
              frameon=False, markerscale=0.6, title="mean per iteration", title_fontsize="small")
    return fig


def hardware_figure(hw: pl.DataFrame):
    """MFU (%) and the all-reduce's bus bandwidth (GB/s) vs GPUs, side by side; absent data says so."""
    return panels_figure(hw, [
        ("mfu", 100.0, "MFU (achieved / peak FLOP/s, %)", "Model FLOPs utilisation",
         "no model flops utilisation recorded", None),
        ("busbw_gbs", 1.0, "all-reduce bus bandwidth (GB/s)", "All-reduce bus bandwidth",
         "no all-reduce bus bandwidth recorded", None),
    ])


def placement_figure(placement: pl.DataFrame):
    """Intra- vs inter-node at equal GPU counts (``placement.placement_table``): per series
    and GPU count one bar per placement (``1x4``, ``2x2``) of the images/s per GPU, one
    colour for one node, another for several. None without an inter-node point."""
    if placement is None or placement.height == 0:
        return None
    from campaign.harvest.views import BASELINE_KEYS

    plt = pyplot()
    series_keys = placement.select(BASELINE_KEYS).unique(maintain_order=True).rows()
    varying = [i for i, _ in enumerate(BASELINE_KEYS) if len({k[i] for k in series_keys}) > 1]
    groups = placement.select(BASELINE_KEYS + ["gpus"]).unique(maintain_order=True).rows()
    fig, ax = plt.subplots(figsize=(max(FIG_W, 1.4 * len(placement) + 1.5), FIG_H))
    x, ticks, labels, seen = 0.0, [], [], set()
    for group in groups:
        rows = placement.filter(pl.all_horizontal(
            [pl.col(k).eq_missing(v) for k, v in zip(BASELINE_KEYS + ["gpus"], group)])).sort("nodes")
        start = x
        for r in rows.iter_rows(named=True):
            inter = r["nodes"] > 1
            label = "inter-node" if inter else "intra-node (one node)"
            value = r["images_per_s_per_gpu"]
            ax.bar(x, float("nan") if value is None else value, width=0.8, color="C1" if inter else "C0",
                   label=None if label in seen else label)
            seen.add(label)
            ax.annotate(r["placement"], (x, 0), xytext=(0, 3), textcoords="offset points", ha="center",
                        va="bottom", fontsize="small", color="white" if value else "black")
            x += 1.0
        ticks.append((start + x - 1.0) / 2)
        name = " ".join(str(group[i]) for i in varying if group[i])
        labels.append(f"{group[-1]} GPUs" + (f"\n{name}" if name else ""))
        x += 0.6
    ax.set_xticks(ticks, labels)
    ax.set_ylabel("throughput per GPU (images/s)")
    ax.grid(True, axis="y", alpha=0.3)
    headroom(ax)
    finish(fig, ax, "Intra- vs inter-node at equal GPU counts (nodes x GPUs per node)")
    return fig
