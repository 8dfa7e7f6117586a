"""The reference study's stated figures, beside what a campaign measured, each compared
as what it is.

The figures live in ``reference_data/reference_study.json`` (package data): what the
study states, each with where it states it (``source``: the section, table or caption of
the study's full text and the sentence that states it; tests/test_reference_study.py
finds every sentence in ../shared/reference/swinv2-ddp-scalability-thesis.txt), its
platform (the study's name, mapped to this project's platform options), GPU count, kind
and, for an average, what it averages over:

speedup                 T(1)/T(N) at ``gpus``
efficiency_upper_bound  efficiency at ``gpus`` below ``value`` (``holds`` says if it does)
relative_time_change    T(gpus)/T(from_gpus) - 1 on one platform
relative_time_platform  T(platform)/T(baseline_platform) - 1 at the same GPU count

A per-count figure is set beside every measured series at its GPU count
(``platform_match``: whether the series ran on the figure's platform; a local campaign
still reads against the published V100 numbers). An **average** is set beside the
campaign's average of the same quantity over the same things:

- over platforms (``average.over = platforms``): one row per series group (trainer,
  experiment, variant, image), the mean over its series on those platforms ("all":
  every platform it ran) of each series' value;
- over GPU counts (``average.over = gpus``): one row per pair of series (platform vs
  baseline), the mean over the counts both ran (or the counts the figure lists) of
  T(platform)/T(baseline) - 1 at each count.

``average_over`` says what the campaign's row averaged. The figures the study states
inconsistently are listed under ``omitted`` with the reason (``reference_omissions``).
The study's partitions as its Table 2 states them are under ``partitions``
(``reference_partitions``): the platform options v100, a100, a100_nvlink_40/80 agree
with them, and say where they do not and why.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from statistics import fmean
from typing import Any, Optional

import polars as pl

from campaign.harvest.views import SAME_WORK_TOLERANCE, SERIES

REFERENCE_FILE = "reference_study.json"
GROUP = [k for k in SERIES if k != "platform"]  # what an average over platforms keeps apart

_SCHEMA = {
    "figure": pl.Utf8, "kind": pl.Utf8, "reference_platform": pl.Utf8, "from_gpus": pl.Int64, "gpus": pl.Int64,
    "reference": pl.Float64, "ideal": pl.Float64, "platform": pl.Utf8, "baseline_platform": pl.Utf8,
    "trainer": pl.Utf8, "experiment": pl.Utf8, "variant": pl.Utf8, "image": pl.Utf8, "nodes": pl.Int64,
    "platform_match": pl.Boolean,
    "measured": pl.Float64, "difference": pl.Float64, "holds": pl.Boolean, "average_over": pl.Utf8,
    "statement": pl.Utf8, "source": pl.Utf8, "note": pl.Utf8,
}


@lru_cache(maxsize=1)
def load_reference() -> dict[str, Any]:
    """The reference dataset (parsed JSON)."""
    text = resources.files("campaign.harvest").joinpath("reference_data", REFERENCE_FILE).read_text()
    return json.loads(text)


def source_text(fig: dict, ref: Optional[dict] = None) -> str:
    """Where a figure is stated: ``<document>; <section/page or 'not known ...'>; "<quote>"``."""
    ref = ref or load_reference()
    src = fig.get("source") or {}
    parts = [ref["source"]["short"], src.get("where") or "not known to this project"]
    if src.get("quote"):
        parts.append(f"\"{src['quote']}\"")
    return "; ".join(parts)


def average_text(fig: dict) -> Optional[str]:
    """What a published average averages over (None for a per-count figure)."""
    avg = fig.get("average")
    if not avg:
        return None
    if avg["over"] == "platforms":
        what = avg.get("platforms")
        return "platforms: all" if what == "all" else "platforms: " + ", ".join(what)
    gpus = avg.get("gpus")
    return "GPU counts: " + (", ".join(map(str, gpus)) if gpus else "not stated (those both platforms ran)")


def reference_figures() -> pl.DataFrame:
    """The stated figures themselves, one row each, with their source and average."""
    ref = load_reference()
    return pl.DataFrame(
        [{**{k: f.get(k) for k in ("id", "kind", "platform", "baseline_platform", "from_gpus", "gpus", "value",
                                   "statement")}, "average_over": average_text(f), "source": source_text(f, ref)}
         for f in ref["figures"]],
        schema={"id": pl.Utf8, "kind": pl.Utf8, "platform": pl.Utf8, "baseline_platform": pl.Utf8,
                "from_gpus": pl.Int64, "gpus": pl.Int64, "value": pl.Float64, "statement": pl.Utf8,
                "average_over": pl.Utf8, "source": pl.Utf8},
    )


def reference_omissions() -> list[dict]:
    """The figures the study states but the dataset leaves out, each with its reason."""
    return list(load_reference().get("omitted") or [])


def reference_partitions() -> list[dict]:
    """The study's CRC partitions as its Table 2 states them, each with the platform
    options that stand for them (``platforms``) and any figure the catalogue keeps
    otherwise (``catalogue``, with the reason in ``inconsistent``)."""
    return list(load_reference()["partitions"]["rows"])


def _series(scaling: pl.DataFrame) -> dict[tuple, dict[int, dict]]:
    out: dict[tuple, dict[int, dict]] = {}
    if scaling.height == 0:
        return out
    for r in scaling.iter_rows(named=True):
        out.setdefault(tuple(r[k] for k in SERIES), {})[r["gpus"]] = r
    return out


def _ratio_minus_one(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return a / b - 1.0 if a is not None and b not in (None, 0) else None


def _row(fig: dict, ref: dict, **values: Any) -> dict:
    row = {k: None for k in _SCHEMA}
    row.update(figure=fig["id"], kind=fig["kind"], reference_platform=fig["platform"], from_gpus=fig.get("from_gpus"),
               gpus=fig.get("gpus"), reference=fig["value"], statement=fig["statement"], source=source_text(fig, ref))
    row.update(values)
    if row["measured"] is not None:
        row["difference"] = row["measured"] - row["reference"]
    return row


OTHER_WORK = "this series is not the study's same-images schedule"


def _other_work(fig: dict, by_n: dict[int, dict]) -> bool:
    """Whether the series trains other images at the figure's GPU count than at the count
    it is measured from (its 1 GPU, or ``from_gpus``): a fixed schedule (the same iterations
    at a fixed batch per GPU), whose time at N is no time to solution, so no figure of the
    study's, which keeps the images ("training time when using a single GPU ... to ... N
    GPUs on that same node", the thesis, line 241 of its text)."""
    at_n = by_n.get(fig.get("gpus"), {})
    if at_n.get("note") and "other images" in at_n["note"]:
        return True
    base = by_n.get(fig.get("from_gpus") or 1, {})
    a, b = at_n.get("images_planned"), base.get("images_planned")
    return bool(a and b) and abs(a - b) > SAME_WORK_TOLERANCE * b


def _value(fig: dict, by_n: dict[int, dict]) -> tuple[Optional[float], float]:
    """(measured, ideal) of a series for a per-series figure (speedup, bound, time change);
    None measured for a series of other work at N (``_other_work``)."""
    kind, n = fig["kind"], fig.get("gpus")
    at_n = {} if _other_work(fig, by_n) else by_n.get(n, {})
    if kind == "speedup":
        return at_n.get("speedup"), float(n)
    if kind == "efficiency_upper_bound":
        return at_n.get("efficiency"), 1.0
    return _ratio_minus_one(at_n.get("time_s"), by_n.get(fig["from_gpus"], {}).get("time_s")), fig["from_gpus"] / n - 1.0


def _notes(fig: dict, by_n: dict[int, dict]) -> list[str]:
    n, at_n = fig.get("gpus"), by_n.get(fig.get("gpus"), {})
    note = []
    if _other_work(fig, by_n):
        note.append(OTHER_WORK)
    if at_n.get("projected"):
        note.append("measured value is projected")
    if not at_n:
        note.append(f"not measured at {n} GPU(s)")
    return note


def _per_series(fig: dict, ref: dict, series: dict) -> list[dict]:
    wanted = ref["platforms"].get(fig["platform"], [])
    rows = []
    for key, by_n in series.items():
        names = dict(zip(SERIES, key))
        measured, ideal = _value(fig, by_n)
        rows.append(_row(
            fig, ref, ideal=ideal, **names, platform_match=fig["platform"] == "all" or names["platform"] in wanted,
            measured=measured,
            holds=(measured < fig["value"]) if fig["kind"] == "efficiency_upper_bound" and measured is not None else None,
            note="; ".join(_notes(fig, by_n)),
        ))
    return rows


def _over_platforms(fig: dict, ref: dict, series: dict) -> list[dict]:
    """An average over platforms against the campaign's mean over its series on them."""
    platforms = fig["average"].get("platforms")
    wanted = None if platforms == "all" else {p for name in platforms for p in ref["platforms"].get(name, [])}
    groups: dict[tuple, list[tuple[dict, dict]]] = {}
    for key, by_n in series.items():
        names = dict(zip(SERIES, key))
        if wanted is None or names["platform"] in wanted:
            groups.setdefault(tuple(names[k] for k in GROUP), []).append((names, by_n))
    rows = []
    for gkey, members in groups.items():
        values = [(names["platform"], _value(fig, by_n)) for names, by_n in members]
        got = [(p, v) for p, (v, _) in values if v is not None]
        ideal = values[0][1][1]
        other = sorted(names["platform"] for names, by_n in members if _other_work(fig, by_n))
        note = [f"campaign mean over {len(got)} series ({', '.join(sorted(p for p, _ in got))})" if got
                else f"{OTHER_WORK} ({', '.join(other)})" if other
                else f"not measured at {fig.get('gpus')} GPU(s) on these platforms"]
        missing = sorted(p for p, (v, _) in values if v is None and p not in other)
        if missing and got:
            note.append(f"not measured on {', '.join(missing)}")
        if other and got:
            note.append(f"left out: {', '.join(other)} ({OTHER_WORK})")
        if wanted is not None:
            absent = sorted(wanted - {names["platform"] for names, _ in members})
            if absent:
                note.append(f"the study's average also covers {', '.join(absent)}, not in this campaign")
        if any(by_n.get(fig.get("gpus"), {}).get("projected") for _, by_n in members):
            note.append("measured values are projected")
        rows.append(_row(
            fig, ref, ideal=ideal, platform=",".join(sorted(p for p, _ in got)) or None,
            **dict(zip(GROUP, gkey)), platform_match=True,
            measured=fmean(v for _, v in got) if got else None,
            average_over="series: " + ", ".join(sorted(p for p, _ in got)) if got else None,
            note="; ".join(note)))
    if not rows:
        rows.append(_row(fig, ref, note=f"needs {fig['platform']} measured in this campaign"))
    return rows


def _per_platform_pair(fig: dict, ref: dict, series: dict) -> list[dict]:
    """Platform vs baseline: at the figure's count, or averaged over GPU counts."""
    mine, theirs = ref["platforms"].get(fig["platform"], []), ref["platforms"].get(fig["baseline_platform"], [])
    average = (fig.get("average") or {}).get("over") == "gpus"
    listed = (fig.get("average") or {}).get("gpus")
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
            both = sorted(set(by_n) & set(b_by_n))
            values = {n: _ratio_minus_one(by_n[n].get("time_s"), b_by_n[n].get("time_s")) for n in both}
            if not average:
                n = fig["gpus"]
                rows.append(_row(fig, ref, gpus=n, **names, baseline_platform=bnames["platform"], platform_match=True,
                                 measured=values.get(n), ideal=0.0,
                                 note="" if n in values else f"not measured at {n} GPU(s) on both platforms"))
                continue
            counts = [n for n in (listed or both) if values.get(n) is not None]
            rows.append(_row(
                fig, ref, gpus=None, **names, baseline_platform=bnames["platform"], platform_match=True, ideal=0.0,
                measured=fmean(values[n] for n in counts) if counts else None,
                average_over="GPU counts: " + ", ".join(map(str, counts)) if counts else None,
                note=(f"campaign mean over the GPU counts both platforms ran ({', '.join(map(str, counts))})"
                      if counts else "no GPU count measured on both platforms")))
    if not rows:
        rows.append(_row(fig, ref, note=f"needs {fig['platform']} and {fig['baseline_platform']} measured in this campaign"))
    return rows


def compare_reference(scaling: pl.DataFrame, reference: Optional[dict] = None) -> pl.DataFrame:
    """Every stated figure beside the matching measured values (time-to-solution view)."""
    ref = reference or load_reference()
    series = _series(scaling)
    rows: list[dict] = []
    for fig in ref["figures"]:
        if fig["kind"] == "relative_time_platform":
            rows += _per_platform_pair(fig, ref, series)
        elif (fig.get("average") or {}).get("over") == "platforms":
            rows += _over_platforms(fig, ref, series)
        else:
            rows += _per_series(fig, ref, series) or [_row(fig, ref, note="no measured series")]
    return pl.DataFrame(rows, schema=_SCHEMA)


def workload_differences(points: list[dict]) -> list[str]:
    """How the campaign's completed points' workload differs from the one the study timed
    (``workload`` and ``schedule`` of the reference dataset: SwinV2-B + UPerNet on ADE20K
    read from files, 512 crops, weak scaling at 8 images per GPU from 160K iterations), one
    phrase per difference and its count of points; empty when every point is the study's
    workload. A comparison across workloads still prints: the differences say how to read it."""
    ref = load_reference()
    work, sched = ref["workload"], ref["schedule"]
    found: dict[str, int] = {}

    def differs(what: str) -> None:
        found[what] = found.get(what, 0) + 1

    for p in points:
        if p.get("state") != "completed":
            continue
        c = p.get("config") or {}
        trainer, data, exp = c.get("trainer") or {}, c.get("dataset") or {}, c.get("experiment") or {}
        params = trainer.get("params") or {}
        if trainer.get("name") != work["trainer"]:
            differs(f"trainer={trainer.get('name')} (the study's: {work['trainer']})")
        elif str(params.get("variant") or "base") != work["variant"]:
            differs(f"trainer.params.variant={params.get('variant')} (the study's: SwinV2-{work['variant']})")
        if data.get("name") != work["dataset"]:
            differs(f"dataset={data.get('name')} (the study's: {work['dataset']} read from files)")
        if data.get("image_size") != work["image_size"]:
            differs(f"dataset.image_size={data.get('image_size')} (the study's: {work['image_size']})")
        if (exp.get("scaling"), exp.get("images_per_gpu")) != (sched["scaling"], sched["images_per_gpu"]):
            differs(f"experiment: {exp.get('scaling')} scaling at {exp.get('images_per_gpu')} images per GPU "
                    f"(the study's: {sched['scaling']} at {sched['images_per_gpu']})")
        elif exp.get("iterations") is not None or exp.get("base_iterations") != sched["base_iterations"]:
            differs(f"a schedule of {exp.get('iterations') or exp.get('base_iterations')} iterations "
                    f"(the study's: {sched['base_iterations']:,}/N)")
    return [f"{what} in {n} point(s)" for what, n in found.items()]


def workload_warning(points: list[dict]) -> Optional[str]:
    """One line saying the comparison lays another workload beside the study's, or None."""
    diffs = workload_differences(points)
    if not diffs:
        return None
    return (f"the reference study timed another workload: {'; '.join(diffs)}; its figures are shown beside these "
            f"as a yardstick, not as the same experiment")
