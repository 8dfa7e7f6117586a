"""The fitted scaling model (harvest --table model, campaign.harvest.model) as a native SVG
figure (campaign.report.chart), drawn from the model table's rows alone: per series its
measured time per image (filled points), the fitted t(N) through the measured and the
predicted GPU counts (a line; predictions hollow on it), the fit's 95 % interval as a
band where the bootstrap gave one, and the knee as a dashed vertical line. Series without
a fit (``kind`` = no fit) are not drawn; the table beside the figure says why.

Marks carry ``data-gpus``, ``data-kind`` and ``data-v`` (the table's seconds per image;
the figure shows milliseconds).
"""

from __future__ import annotations

from typing import Optional

import polars as pl

from campaign.report.chart import Panel, color, figure_svg, value
from campaign.report.html import esc

HEADROOM = 1.05


def _keys(model: pl.DataFrame) -> list[str]:
    """The series' columns: the model table's columns before ``gpus`` (its SERIES and the
    swept options harvest adds)."""
    return model.columns[:model.columns.index("gpus")]


def model_figure(model: Optional[pl.DataFrame]) -> Optional[str]:
    """Time per image vs GPUs with the fitted curve; None without a fitted series."""
    if model is None or model.height == 0 or "fit_t_image_s" not in model.columns:
        return None
    fitted = model.filter(pl.col("gpus").is_not_null() & pl.col("fit_t_image_s").is_not_null())
    if fitted.height == 0:
        return None
    keys = _keys(model)
    series = fitted.select(keys).unique(maintain_order=True).rows()
    from campaign.harvest.model import SERIES  # the label names these; a swept option is in the variant

    named = [i for i, k in enumerate(keys) if k in SERIES]
    varying = [i for i in named if len({k[i] for k in series}) > 1] or [0]
    rows: dict[tuple, list[dict]] = {k: [] for k in series}
    for r in fitted.iter_rows(named=True):
        rows[tuple(r[k] for k in keys)].append(r)
    vals = [v for r in fitted.iter_rows(named=True)
            for v in (r["t_image_s"], r["fit_t_image_s"], r["fit_hi_s"]) if v is not None]
    gpus = sorted(set(fitted["gpus"].to_list()))
    p = Panel("Fitted model t(N) = a + b/N + c log2 N + d r(N)", "time per image (ms)",
              ytop=max(vals) * 1000.0 * HEADROOM, gpus=gpus)
    legend, any_band, any_pred, any_knee = [], False, False, False
    for i, key in enumerate(series):
        c, mine = color(i), sorted(rows[key], key=lambda r: r["gpus"])
        label = " ".join(str(key[j]) for j in varying if key[j] not in (None, "")) or str(key[0])
        start = len(p.marks)
        band = [r for r in mine if r["fit_lo_s"] is not None and r["fit_hi_s"] is not None]
        if len(band) >= 2:
            p.band([(r["gpus"], r["fit_lo_s"] * 1000.0) for r in band],
                   [(r["gpus"], r["fit_hi_s"] * 1000.0) for r in band], c)
            any_band = True
        p.line([(r["gpus"], r["fit_t_image_s"] * 1000.0) for r in mine], c, attrs=" data-fit=\"1\"")
        for r in mine:
            measured = r["kind"] == "measured" and r["t_image_s"] is not None
            v = r["t_image_s"] if measured else r["fit_t_image_s"]
            any_pred |= not measured
            p.marker(r["gpus"], v * 1000.0, c, hollow=not measured,
                     attrs=f" data-gpus=\"{r['gpus']}\" data-kind=\"{esc(r['kind'])}\" data-v=\"{value(v)}\"")
        knee = mine[0].get("knee_gpus")
        if knee and gpus[0] <= knee <= gpus[-1]:
            p.vline(knee, c, attrs=f" data-knee=\"{knee}\"")
            any_knee = True
        p.group(f" data-series=\"{esc(label)}\"", start)
        legend.append((label, c, "line"))
    if any_pred:
        legend.append(("predicted (hollow, on the fit)", "#808080", "hollow"))
    if any_band:
        legend.append(("fit's 95 % interval", "#808080", "bar"))
    if any_knee:
        legend.append(("knee (efficiency >= 80 %)", "#808080", "dash"))
    return figure_svg("model", [p], legend)
