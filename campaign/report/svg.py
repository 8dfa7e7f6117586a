"""The report's figures as native SVG (campaign.report.chart), one for each figure
``harvest --plots`` draws, from the same tables and the same series: the line figures
of campaign.harvest.plots (``series_lines``: one line per series labelled by
``series_labels``, projected points hollow with their interval, the ideal dashed), its
panels and the platform comparison's grouped medians, and the bar figures of
campaign.harvest.plots_bars (the phase stack, placement). Harvest's PNGs are untouched;
these are drawn for the page only, without matplotlib (cheap, text as ``<text>``).

Every data mark carries ``data-gpus`` and ``data-v`` (the table's value, unscaled) inside
a ``<g data-series=...>`` (or ``data-phase``/``data-platform``), so a figure maps back
to its table.
"""

from __future__ import annotations

from typing import Optional

import polars as pl

from campaign.report.chart import Panel, color, figure_svg, value
from campaign.report.html import esc

HEADROOM = 1.05  # above the highest value drawn (the legend sits beside the plot, not over it)


def _series(df: pl.DataFrame, y: str, *, ideal: Optional[str] = None, lo: Optional[str] = None,
            hi: Optional[str] = None) -> list[dict]:
    """Per series (harvest.figure.series_labels' order and labels) its rows with ``y``, sorted
    by GPUs (harvest.figure.series_lines' selection; one pass over the rows, no filter per series)."""
    from campaign.harvest.figure import series_labels
    from campaign.harvest.views import SERIES

    labels = series_labels(df)
    cols = [y, ideal, lo, hi, "projected"]
    picked = [c if c and c in df.columns else None for c in cols]
    frame = df.select([*SERIES, "gpus", *(pl.col(c) if c else pl.lit(None) .alias(f"_{i}")
                                          for i, c in enumerate(picked))])
    rows: dict[tuple, list[tuple]] = {k: [] for k in labels}
    for r in frame.rows():
        key, (g, v, iv, lv, hv, proj) = tuple(r[:len(SERIES)]), r[len(SERIES):]
        if v is not None and g is not None:
            rows[key].append((g, v, bool(proj), lv, hv, iv))
    out = []
    for i, (key, label) in enumerate(labels.items()):
        mine = sorted(rows[key], key=lambda t: t[0])  # stable, as polars' sort("gpus")
        out.append({"label": label, "color": color(i), "points": [t[:5] for t in mine],
                    "ideal": [(t[0], t[5]) for t in mine if t[5] is not None]})
    return out


def _top(series: list[dict], scale: float, floor: float = 0.0) -> float:
    vals = [floor]
    for s in series:
        for _, v, proj, lo, hi in s["points"]:
            vals += [v * scale] + ([hi * scale] if proj and hi is not None and lo is not None else [])
        vals += [v * scale for _, v in s["ideal"]]
    return max(vals) * HEADROOM


def _draw_series(panel: Panel, series: list[dict], scale: float = 1.0, missing: str = "no value",
                 ideal_label: str = "ideal") -> list[tuple[str, str, str]]:
    """harvest.figure.series_lines in SVG: the legend entries it would list."""
    legend, any_ideal, any_projected = [], False, False
    for s in series:
        start, c = len(panel.marks), s["color"]
        if not s["points"]:
            legend.append((f"{s['label']} ({missing})", c, "faded"))
            continue
        legend.append((s["label"], c, "line"))
        panel.line([(g, v * scale) for g, v, *_ in s["points"]], c)
        for g, v, proj, lo, hi in s["points"]:
            if proj and lo is not None and hi is not None:
                panel.errorbar(g, lo * scale, hi * scale, c)
                any_projected = True
            elif proj:
                any_projected = True
            ranged = proj and lo is not None and hi is not None
            extra = f" data-lo=\"{value(lo)}\" data-hi=\"{value(hi)}\"" if ranged else ""
            panel.marker(g, v * scale, c, hollow=bool(proj),
                         attrs=f" data-gpus=\"{g}\" data-v=\"{value(v)}\"{extra}")
        if s["ideal"]:
            panel.line([(g, v * scale) for g, v in s["ideal"]], c, dash=True, opacity=0.6, attrs=" data-ideal=\"1\"")
            any_ideal = True
        panel.group(f" data-series=\"{esc(s['label'])}\"", start)
    if any_ideal:
        legend.append((ideal_label, "#808080", "dash"))
    if any_projected:
        legend.append(("projected (hollow)", "#808080", "hollow"))
    return legend


def _gpus(df: pl.DataFrame) -> list[int]:
    return sorted(set(df["gpus"].drop_nulls().to_list()))


def line_figure(name: str, df: pl.DataFrame, y: str, ylabel: str, title: str, *, scale: float = 1.0,
                ideal: Optional[str] = None, ideal_label: str = "ideal", lo: Optional[str] = None,
                hi: Optional[str] = None, missing: str = "no value") -> str:
    """One panel of ``y`` per series vs GPUs (time to solution, throughput)."""
    series = _series(df, y, ideal=ideal, lo=lo, hi=hi)
    panel = Panel(title, ylabel, ytop=_top(series, scale), gpus=_gpus(df))
    legend = _draw_series(panel, series, scale, missing, ideal_label)
    return figure_svg(name, [panel], legend)


def speedup_figure(scaling: pl.DataFrame, title: str = "Speedup T(1)/T(N)") -> str:
    """Speedup T(1)/T(N) per series, the ideal S = N dashed black."""
    series, gpus = _series(scaling, "speedup"), _gpus(scaling)
    panel = Panel(title, "speedup T(1)/T(N) (×)", ytop=_top(series, 1.0, max(gpus, default=1)),
                  gpus=gpus)
    legend = _draw_series(panel, series, missing="no 1-GPU baseline")
    panel.line([(g, float(g)) for g in gpus], "#000", dash=True, opacity=0.6, attrs=" data-ideal=\"1\"")
    return figure_svg("speedup", [panel], legend + [("ideal (S = N)", "#000", "dash")])


def efficiency_figure(scaling: pl.DataFrame, title: str = "Parallel efficiency S/N") -> str:
    """Parallel efficiency in % per series, the ideal 100 % dashed."""
    series = _series(scaling, "efficiency")
    top = max([110.0] + [v * 100 + 10 for v in scaling["efficiency"].drop_nulls().to_list()])
    panel = Panel(title, "parallel efficiency S/N (%)", ytop=top, gpus=_gpus(scaling))
    legend = _draw_series(panel, series, 100.0, "no 1-GPU baseline")
    panel.hline(100.0)
    return figure_svg("efficiency", [panel], legend + [("ideal (100 %)", "#000", "dash")])


def panels_figure(name: str, df: pl.DataFrame, panels) -> str:
    """harvest.figure.panels_figure: (column, scale, y label, title, text when no value) side
    by side, one legend (the same series in each)."""
    drawn, legend = [], []
    for col, scale, ylabel, title, missing in panels:
        if df[col].null_count() == df.height:
            p = Panel(title, ylabel, ytop=100.0 if scale == 100.0 else 1.0, gpus=_gpus(df))
            p.note(missing)
        else:
            series = _series(df, col)
            p = Panel(title, ylabel, ytop=_top(series, scale), gpus=_gpus(df))
            entries = _draw_series(p, series, scale)
            legend = legend or entries
        drawn.append(p)
    return figure_svg(name, drawn, legend)


def platform_comparison_figure(scaling: pl.DataFrame, util: pl.DataFrame) -> Optional[str]:
    """Speedup, efficiency, GPU and CPU utilisation: per GPU count one bar per platform, each
    the median over the platform's series (harvest.plots.platform_comparison_figure's).
    None when fewer than two platforms were measured."""
    from campaign.harvest.plots import COMPARISON_PANELS, comparison_axis, platform_comparison_data

    plats = sorted(set(scaling["platform"].to_list()))
    if len(plats) < 2:
        return None
    merged = platform_comparison_data(scaling, util)
    at = {(r["platform"], r["where"]): r for r in merged.iter_rows(named=True)}
    wheres, xlabel = comparison_axis(merged)
    width = 0.8 / len(plats)
    panels = []
    for col, ylabel, scale in COMPARISON_PANELS:  # its utilisation panels: eq. 3.3, as the study's Figs 6-8
        vals = [v[col] * scale for v in at.values() if v.get(col) is not None]
        p = Panel(ylabel.split(" (")[0].split(" T(")[0], ylabel, ytop=max(vals + [0.0]) * HEADROOM or 1.0,
                  categories=[(i, str(g)) for i, g in enumerate(wheres)], xlabel=xlabel)
        for j, plat in enumerate(plats):
            start = len(p.marks)
            for i, g in enumerate(wheres):
                row = at.get((plat, g), {})
                v = row.get(col)
                if v is not None:  # data-gpus the GPU count, as every mark's; data-placement nodes x GPUs per node
                    p.bar(i + (j - (len(plats) - 1) / 2) * width, 0.0, v * scale, width, color(j),
                          attrs=f" data-gpus=\"{row['gpus']}\" data-placement=\"{esc(row['placement'])}\" "
                                f"data-v=\"{value(v)}\"")
            p.group(f" data-platform=\"{esc(plat)}\"", start)
        if not vals:
            p.note("not recorded (CPU ranks: no device time)" if col.endswith("_util_study") else "not recorded")
        panels.append(p)
    return figure_svg("platform_comparison", panels, [(plat, color(j), "bar") for j, plat in enumerate(plats)],
                      suptitle="Platform comparison: " + " vs ".join(plats))


def harvest_figures(tables: dict[str, pl.DataFrame], other: Optional[dict[str, pl.DataFrame]] = None,
                    style=None) -> dict[str, str]:
    """Figure name -> SVG element for every figure harvest --plots draws from these tables
    (campaign.harvest.figures.write_figures' list, without the campaign label: the page
    says whose they are); ``other``: another campaign's tables, its platforms joining the
    platform comparison."""
    from campaign.report.svg_bars import breakdown_figure, placement_figure
    from campaign.report.svg_model import model_figure

    from campaign.harvest.study_style import PLAIN

    if not tables:
        return {}
    style = style or PLAIN  # the study's units and titles (campaign.harvest.study_style)
    scaling, util = tables["scaling"], tables["utilisation"]
    both_scaling, both_util = scaling, util
    if other and other.get("scaling") is not None and other["scaling"].height:
        both_scaling = pl.concat([scaling, other["scaling"]], how="diagonal_relaxed")
        both_util = pl.concat([util, other["utilisation"]], how="diagonal_relaxed")
    stack, hardware = tables.get("phase_stack"), tables.get("hardware")
    figures = {
        "training_time": line_figure("training_time", scaling, "time_s", f"training time ({style.time_unit})",
                                     style.time_title, ideal="ideal_time_s", ideal_label="ideal T(1)/N",
                                     lo="time_lo_s", hi="time_hi_s", scale=style.time_scale),
        "speedup": speedup_figure(scaling, style.speedup_title),
        "efficiency": efficiency_figure(scaling, style.efficiency_title),
        "throughput": line_figure("throughput", tables["throughput"], "images_per_s_per_gpu",
                                  "throughput per GPU (images/s)", "Throughput per GPU",
                                  ideal="ideal_images_per_s_per_gpu", ideal_label="ideal: 1-GPU rate"),
        "utilisation": panels_figure("utilisation", util, [
            (col, 100.0, f"{what} utilisation (%)", f"{what} utilisation", f"no {what} utilisation recorded")
            for col, what in (("gpu_util", "GPU"), ("cpu_util", "CPU"))]),
        "platform_comparison": platform_comparison_figure(both_scaling, both_util),
        "breakdown": breakdown_figure(stack) if stack is not None else None,
        "hardware": panels_figure("hardware", hardware, [
            ("mfu", 100.0, "MFU (achieved / peak FLOP/s, %)", "Model FLOPs utilisation",
             "no model flops utilisation recorded"),
            ("busbw_gbs", 1.0, "all-reduce bus bandwidth (GB/s)", "All-reduce bus bandwidth",
             "no all-reduce bus bandwidth recorded")]) if hardware is not None and hardware.height else None,
        "placement": placement_figure(tables.get("placement")),
        "model": model_figure(tables.get("model")),
    }
    return {name: svg for name, svg in figures.items() if svg is not None}
