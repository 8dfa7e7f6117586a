"""The reference study's published figures, beside what a campaign measured.

The figures live in ``reference_data/reference_study.json`` (package data): exactly
what the study publishes, each with its platform (the study's name, mapped to this
project's platform options), GPU count (null where the study gives none) and kind:

speedup                 T(1)/T(N) at ``gpus``
efficiency_upper_bound  efficiency at ``gpus`` below ``value`` (``holds`` says if it does)
relative_time_change    T(gpus)/T(from_gpus) - 1 on one platform (or "all": an average)
relative_time_platform  T(platform)/T(baseline_platform) - 1 at the same GPU count

``compare_reference`` puts every figure beside every measured series at the figure's
GPU count (``platform_match`` says whether the series ran on the figure's platform:
a local campaign still reads against the published V100 numbers), with the difference
measured - published and the ideal value of the same quantity.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Any, Optional

import polars as pl

from campaign.harvest.views import SERIES

REFERENCE_FILE = "reference_study.json"

_SCHEMA = {
    "figure": pl.Utf8, "kind": pl.Utf8, "reference_platform": pl.Utf8, "from_gpus": pl.Int64, "gpus": pl.Int64,
    "reference": pl.Float64, "ideal": pl.Float64, "platform": pl.Utf8, "baseline_platform": pl.Utf8,
    "trainer": pl.Utf8, "experiment": pl.Utf8, "variant": pl.Utf8, "image": pl.Utf8, "nodes": pl.Int64,
    "platform_match": pl.Boolean,
    "measured": pl.Float64, "difference": pl.Float64, "holds": pl.Boolean, "statement": pl.Utf8, "note": pl.Utf8,
}


@lru_cache(maxsize=1)
def load_reference() -> dict[str, Any]:
    """The reference dataset (parsed JSON)."""
    text = resources.files("campaign.harvest").joinpath("reference_data", REFERENCE_FILE).read_text()
    return json.loads(text)


def reference_figures() -> pl.DataFrame:
    """The published figures themselves, one row each."""
    figs = load_reference()["figures"]
    return pl.DataFrame(
        [{k: f.get(k) for k in ("id", "kind", "platform", "baseline_platform", "from_gpus", "gpus", "value", "statement")}
         for f in figs],
        schema={"id": pl.Utf8, "kind": pl.Utf8, "platform": pl.Utf8, "baseline_platform": pl.Utf8,
                "from_gpus": pl.Int64, "gpus": pl.Int64, "value": pl.Float64, "statement": pl.Utf8},
    )


def _series(scaling: pl.DataFrame) -> dict[tuple, dict[int, dict]]:
    out: dict[tuple, dict[int, dict]] = {}
    if scaling.height == 0:
        return out
    for r in scaling.iter_rows(named=True):
        out.setdefault(tuple(r[k] for k in SERIES), {})[r["gpus"]] = r
    return out


def _ratio_minus_one(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return a / b - 1.0 if a is not None and b not in (None, 0) else None


def _row(fig: dict, **values: Any) -> dict:
    row = {k: None for k in _SCHEMA}
    row.update(figure=fig["id"], kind=fig["kind"], reference_platform=fig["platform"], from_gpus=fig.get("from_gpus"),
               gpus=fig.get("gpus"), reference=fig["value"], statement=fig["statement"])
    row.update(values)
    if row["measured"] is not None:
        row["difference"] = row["measured"] - row["reference"]
    return row


def _per_series(fig: dict, platforms: dict, series: dict) -> list[dict]:
    kind, n = fig["kind"], fig.get("gpus")
    wanted = platforms.get(fig["platform"], [])
    rows = []
    for key, by_n in series.items():
        names = dict(zip(SERIES, key))
        at_n = by_n.get(n, {})
        note = []
        if kind == "speedup":
            measured, ideal = at_n.get("speedup"), float(n)
        elif kind == "efficiency_upper_bound":
            measured, ideal = at_n.get("efficiency"), 1.0
        else:  # relative_time_change
            base = by_n.get(fig["from_gpus"], {})
            measured = _ratio_minus_one(at_n.get("time_s"), base.get("time_s"))
            ideal = fig["from_gpus"] / n - 1.0
            if fig["platform"] == "all":
                note.append("published value is an average over the study's platforms")
        if at_n.get("note") and "other images" in at_n["note"]:
            note.append("this series is not the study's same-images schedule")
        if at_n.get("projected"):
            note.append("measured value is projected")
        if measured is None and not at_n:
            note.append(f"not measured at {n} GPU(s)")
        rows.append(_row(
            fig, ideal=ideal, **names, platform_match=fig["platform"] == "all" or names["platform"] in wanted,
            measured=measured,
            holds=(measured < fig["value"]) if kind == "efficiency_upper_bound" and measured is not None else None,
            note="; ".join(note),
        ))
    return rows


def _per_platform_pair(fig: dict, platforms: dict, series: dict) -> list[dict]:
    mine, theirs = platforms.get(fig["platform"], []), platforms.get(fig["baseline_platform"], [])
    rows = []
    for key, by_n in series.items():
        names = dict(zip(SERIES, key))
        if names["platform"] not in mine:
            continue
        for bkey, b_by_n in series.items():
            bnames = dict(zip(SERIES, bkey))
            # the same series on the other platform: trainer, experiment, variant and image
            if bnames["platform"] not in theirs or any(bnames[k] != names[k] for k in SERIES if k != "platform"):
                continue
            for n in sorted(set(by_n) & set(b_by_n)):
                rows.append(_row(
                    fig, gpus=n, **names, baseline_platform=bnames["platform"], platform_match=True,
                    measured=_ratio_minus_one(by_n[n].get("time_s"), b_by_n[n].get("time_s")),
                    note="the study gives no GPU count: compared at each count both platforms ran",
                ))
    if not rows:
        rows.append(_row(fig, note=f"needs {fig['platform']} and {fig['baseline_platform']} measured in this campaign"))
    return rows


def compare_reference(scaling: pl.DataFrame, reference: Optional[dict] = None) -> pl.DataFrame:
    """Every published figure beside the matching measured values (time-to-solution view)."""
    ref = reference or load_reference()
    platforms, series = ref["platforms"], _series(scaling)
    rows: list[dict] = []
    for fig in ref["figures"]:
        if fig["kind"] == "relative_time_platform":
            rows += _per_platform_pair(fig, platforms, series)
        else:
            got = _per_series(fig, platforms, series)
            rows += got or [_row(fig, note="no measured series")]
    return pl.DataFrame(rows, schema=_SCHEMA)
