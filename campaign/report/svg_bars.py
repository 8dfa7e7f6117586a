"""The report's bar figures as native SVG (campaign.report.chart): where an iteration's
time goes (harvest.plots_bars.breakdown_figure's stack: per series and GPU count one bar
of the disjoint phases' mean milliseconds per iteration, the measured iteration a black
tick) and intra- vs inter-node placement (its placement_figure). Same tables, same
series, same order; every segment carries ``data-phase``, ``data-gpus`` and ``data-v``
(the table's seconds per iteration), every placement bar its ``data-placement``."""

from __future__ import annotations

from typing import Optional

import polars as pl

from campaign.report.chart import COLORS, Panel, color, figure_svg, value
from campaign.report.html import esc

HEADROOM_BARS = 1.05  # above the tallest bar or tick (the legend sits beside the plot)
GROUP_GAP = 0.6  # blank bar widths between two series' bars (harvest.plots_bars._GROUP_GAP)
# harvest.plots_bars._PHASE_COLORS, as colours: a phase has the colour harvest's PNG gives it
PHASE_COLORS = {"data": 7, "forward": 0, "backward": 8, "backward_compute": 2, "comm_exposed": 3,
                "comm_marked": 1, "step": 4, "train_step": 5,
                "study.compute": 0, "study.comm_barrier": 3, "study.comm_sync": 3}


def breakdown_figure(stack: pl.DataFrame) -> str:
    """The phase stack (``utilisation.phase_stack``) as stacked bars; without any phase, says so."""
    from campaign.harvest.figure import series_labels
    from campaign.harvest.views import SERIES

    from campaign.harvest.study_timing import STUDY_TITLE, is_study_stack

    title = STUDY_TITLE if is_study_stack(stack) else "Where an iteration's time goes"
    bars = stack.filter(pl.col("phase") != "iteration") if stack.height else stack
    if bars.height == 0:
        p = Panel(title, "time per iteration (ms)", ytop=1.0, categories=[], xlabel="")
        p.note("no breakdown recorded")
        p.yticks = [0.0]  # no scale to show
        return figure_svg("breakdown", [p])
    keys = stack.select(SERIES + ["gpus"]).unique(maintain_order=True).sort(SERIES + ["gpus"], nulls_last=True).rows()
    labels = series_labels(stack)
    series = list(dict.fromkeys(k[:-1] for k in keys))
    xs = [i + GROUP_GAP * series.index(k[:-1]) for i, k in enumerate(keys)]
    at = {k: i for i, k in enumerate(keys)}
    it = stack.filter(pl.col("phase") == "iteration")
    top = [0.0] * len(keys)
    segments = []
    for _, phase, label in bars.select("order", "phase", "label").unique().sort("order").rows():
        seg = bars.filter(pl.col("phase") == phase)
        rows = [(at[tuple(r[:-1])], r[-1]) for r in seg.select(SERIES + ["gpus", "per_iteration_s"]).rows()]
        segments.append((phase, label, [(i, s, top[i]) for i, s in rows]))
        for i, s in rows:
            top[i] += s * 1000.0
    ticks = [(at[tuple(r[:-1])], r[-1]) for r in it.select(SERIES + ["gpus", "per_iteration_s"]).rows()]
    many = len(series) > 1
    cats = [(x, str(k[-1])) for x, k in zip(xs, keys)]
    p = Panel(title + ("" if many else f": {labels[keys[0][:-1]]}"), "time per iteration (ms)",
              ytop=max(top + [s * 1000.0 for _, s in ticks]) * HEADROOM_BARS, categories=cats,
              xlim=(-0.6, xs[-1] + 0.6), xlabel="GPUs (N), per series" if many else "GPUs (N)")
    for phase, label, segs in segments:
        start = len(p.marks)
        for i, s, bottom in segs:
            p.bar(xs[i], bottom, s * 1000.0, 0.6, COLORS[PHASE_COLORS.get(phase, 9)],
                  attrs=f" data-gpus=\"{keys[i][-1]}\" data-v=\"{value(s)}\"")
        p.group(f" data-phase=\"{esc(phase)}\"", start)
    start = len(p.marks)
    for i, s in ticks:
        p.tick(xs[i], s * 1000.0, 0.3, attrs=f" data-gpus=\"{keys[i][-1]}\" data-v=\"{value(s)}\"")
    p.group(" data-phase=\"iteration\"", start)
    if many:  # each series named once, above its bars
        for s in series:
            mine = [x for x, k in zip(xs, keys) if k[:-1] == s]
            p.label(sum(mine) / len(mine), p.ytop, labels[s], dy=14)
    legend = ([("iteration (measured)", "#000", "tick")] if ticks else []) + [
        (label, COLORS[PHASE_COLORS.get(phase, 9)], "bar") for phase, label, _ in reversed(segments)]
    return figure_svg("breakdown", [p], legend, legend_title="mean per iteration")



def placement_figure(placement: Optional[pl.DataFrame]) -> Optional[str]:
    """Per series and GPU count one bar per placement (``1x4``, ``2x2``) of the images/s per
    GPU, one colour for one node, another for several; None without a row."""
    if placement is None or placement.height == 0:
        return None
    from campaign.harvest.views import BASELINE_KEYS

    series_keys = placement.select(BASELINE_KEYS).unique(maintain_order=True).rows()
    varying = [i for i, _ in enumerate(BASELINE_KEYS) if len({k[i] for k in series_keys}) > 1]
    groups = placement.select(BASELINE_KEYS + ["gpus"]).unique(maintain_order=True).rows()
    x, cats, bars = 0.0, [], []
    for group in groups:
        rows = placement.filter(pl.all_horizontal(
            [pl.col(k).eq_missing(v) for k, v in zip(BASELINE_KEYS + ["gpus"], group)])).sort("nodes")
        start = x
        for r in rows.iter_rows(named=True):
            bars.append((x, r))
            x += 1.0
        name = " ".join(str(group[i]) for i in varying if group[i])
        cats.append(((start + x - 1.0) / 2, f"{group[-1]} GPUs" + (f"\n{name}" if name else "")))
        x += 0.6
    vals = [r["images_per_s_per_gpu"] for _, r in bars if r["images_per_s_per_gpu"] is not None]
    p = Panel("Intra- vs inter-node at equal GPU counts (nodes x GPUs per node)", "throughput per GPU (images/s)",
              ytop=max(vals + [0.0]) * 1.18 or 1.0, categories=cats, xlim=(-0.6, x - 1.0), xlabel="")
    for bx, r in bars:
        v, inter = r["images_per_s_per_gpu"], r["nodes"] > 1
        if v is not None:
            p.bar(bx, 0.0, v, 0.8, color(1 if inter else 0),
                  attrs=f" data-placement=\"{esc(r['placement'])}\" data-gpus=\"{r['gpus']}\" data-v=\"{value(v)}\"")
        p.label(bx, 0.0, str(r["placement"]), fill="#fff" if v else "#000")
    legend = [(label, color(c), "bar") for c, label in ((0, "intra-node (one node)"), (1, "inter-node"))
              if any((r["nodes"] > 1) == bool(c) for _, r in bars)]
    return figure_svg("placement", [p], legend)
