"""The harvest command's body: read, derive, compare, export, draw."""

from __future__ import annotations

import sys
from typing import Optional, Sequence

import polars as pl

from campaign.errors import ConfigError
from campaign.harvest.export import FORMATS, write_tables
from campaign.harvest.query import FILTERS, POINT_IDS
from campaign.text import printable

TABLES = ("scaling", "throughput", "utilisation", "breakdown", "hardware")
TABLE_CHOICES = TABLES + ("all",)
COMPARE_BUILTIN = ("reference", "ideal")

TITLES = {
    "scaling": "time to solution: training time T(N) (slowest rank, median over repeats; warm-up apart); "
               "speedup = T(1)/T(N), efficiency = speedup/N, ideal T(1)/N",
    "throughput": "throughput: per-iteration time and images/s (medians over repeats); "
                  "throughput speedup = images/s at N / images/s at 1, efficiency = that/N, ideal: constant images/s per GPU",
    "utilisation": "utilisation: GPU and CPU busy time / the profiler window's wall time (<= 1; cpu_busy_cores: "
                   "mean busy cores); compute, communication and data-wait shares of the timed window",
    "breakdown": "breakdown: seconds per phase, per run and per iteration, and share of its window",
    "hardware": "hardware: model FLOPs utilisation (achieved / peak TFLOP/s per GPU), all-reduce volume and bus "
                "bandwidth vs the interconnect, exposed communication per iteration, peak memory (medians over repeats)",
    "reference": "reference study (Garrett 2023): its stated figures beside measured values (difference = measured - "
                 "stated; an average beside the campaign's average over the same things; where each is stated: the "
                 "source column of --to csv/json)",
    "ideal": "ideal: measured values beside the ideal line (difference = measured - ideal)",
    "campaign": "campaign comparison: this campaign (measured) beside {other} (reference)",
}

# What the terminal shows of each table; the exports carry every column.
TERMINAL_COLUMNS = {
    "scaling": ["platform", "trainer", "experiment", "variant", "image", "gpus", "repeats", "iterations", "time_s",
                "time_min_s", "time_max_s", "time_olympic_s", "ideal_time_s", "speedup", "efficiency", "gpu_hours", "note"],
    "throughput": ["platform", "trainer", "experiment", "variant", "image", "gpus", "repeats", "global_batch", "iter_s",
                   "iter_iqr_s", "ideal_iter_s", "images_per_s", "images_per_s_per_gpu", "ideal_images_per_s_per_gpu",
                   "throughput_speedup", "throughput_efficiency", "note"],
    "hardware": ["platform", "trainer", "experiment", "variant", "image", "gpus", "repeats", "precision", "math",
                 "achieved_tflops", "peak_tflops", "mfu", "allreduce_mb_per_iter", "busbw_gbs", "busbw_fraction",
                 "exposed_comm_ms", "peak_memory_gb", "warmup_peak_memory_gb", "note"],
    "reference": ["statement", "platform", "variant", "image", "gpus", "average_over", "platform_match", "measured",
                  "reference", "ideal", "difference", "holds", "note"],
}


def parse_where(items: Optional[Sequence[str]], where: Optional[dict] = None) -> dict:
    """Merge ``KEY=V1,V2`` filters into ``where`` (key -> values); values stay data, bound by the query.
    ``image=`` takes sha256 prefixes or image paths (``none``: points without a container)."""
    out = {k: list(v) for k, v in (where or {}).items()}
    for item in items or []:
        key, sep, values = item.partition("=")
        key = key.strip()
        if not sep or key not in FILTERS or not values:
            raise ConfigError(f"--where {item!r}: expected KEY=VALUE[,VALUE...] with KEY one of {', '.join(FILTERS)}")
        vals = [v.strip() for v in values.split(",") if v.strip()]
        if key == "gpus":
            try:
                vals = [int(v) for v in vals]
            except ValueError:
                raise ConfigError(f"--where {item!r}: gpus takes integers") from None
        out.setdefault(key, []).extend(vals)
    return out


def _terminal(name: str, df: pl.DataFrame) -> pl.DataFrame:
    cols = [c for c in TERMINAL_COLUMNS.get(name, df.columns) if c in df.columns]
    for key in ("variant", "image"):  # a series key no point has says nothing
        if key in cols and df[key].fill_null("").eq("").all():
            cols.remove(key)
    return df.select(cols)


def completed_where(store, campaign: dict, where: Optional[dict]) -> tuple[dict, list[dict], list[str]]:
    """``where`` narrowed to the campaign's points whose effective state is completed
    (campaign.state, as campaign status shows them), with the points and warnings."""
    from campaign.state import completed_ids, effective_points

    points, warnings = effective_points(store, campaign)
    done = completed_ids(points)
    out = dict(where or {})
    if len(done) < len(points):  # all completed (the usual case): no id list to bind
        out[POINT_IDS] = done
    return out, points, warnings


def _not_harvested(cid: str, points: list[dict]) -> Optional[str]:
    """One line on the points harvest leaves out (not completed), or None."""
    from collections import Counter

    others = Counter(p["state"] for p in points if p["state"] != "completed")
    if not others:
        return None
    done = len(points) - sum(others.values())
    parts = ", ".join(f"{n} {state}" for state, n in sorted(others.items()))
    return f"campaign {cid}: {done} of {len(points)} point(s) completed; not harvested: {parts} (campaign status {cid})"


def _printable_frame(df: pl.DataFrame) -> pl.DataFrame:
    """Text cells with control characters escaped (campaign.text), for the terminal."""
    text = [c for c, t in df.schema.items() if t == pl.Utf8]
    return df.with_columns(pl.col(c).map_elements(printable, return_dtype=pl.Utf8) for c in text) if text else df


def _tables(store, campaign_id: str, where: Optional[dict], wanted: Sequence[str],
            stack: bool = False) -> dict[str, pl.DataFrame]:
    """The campaign's tables; ``stack``: also the breakdown figure's phase stack (``phase_stack``)."""
    from campaign.harvest.derive import engine_phases, point_frame
    from campaign.harvest.utilisation import breakdown_table, phase_stack, utilisation_table
    from campaign.harvest.views import scaling_table, throughput_table

    if where is not None and where.get(POINT_IDS) == []:
        return {}
    points = point_frame(store, [campaign_id], where)
    if points.height == 0:
        return {}
    out = {"scaling": scaling_table(points), "throughput": throughput_table(points),
           "utilisation": utilisation_table(points)}
    if "hardware" in wanted or stack:
        from campaign.harvest.hardware import hardware_table

        out["hardware"] = hardware_table(points)
    if "breakdown" in wanted or stack:
        phases = engine_phases(store, points["attempt_id"].to_list())
        if "breakdown" in wanted:
            out["breakdown"] = breakdown_table(points, phases)
        if stack:
            out["phase_stack"] = phase_stack(points, phases)
    return out


def harvest(ref: Optional[str], *, store_url: str, fmt: str = "table", out: Optional[str] = None,
            where: Optional[dict] = None, table: str = "scaling", compare: Optional[str] = None,
            plots: Optional[str] = None, where_items: Optional[Sequence[str]] = None) -> int:
    """Harvest one campaign: print or write its tables (or a comparison), draw its figures."""
    from campaign.store import open_store

    if fmt not in FORMATS:
        raise ConfigError(f"unknown format '{fmt}'; available: {', '.join(FORMATS)}")
    if table not in TABLE_CHOICES:
        raise ConfigError(f"unknown table '{table}'; available: {', '.join(TABLE_CHOICES)}")
    where = parse_where(where_items, where)
    wanted = TABLES if table == "all" else (table,)
    other_id, other = None, {}
    with open_store(store_url, readonly=True) as store:
        campaign = store.resolve_campaign(ref)
        cid = campaign["id"]
        mine, points, warnings = completed_where(store, campaign, where)
        tables = _tables(store, cid, mine, wanted, stack=plots is not None)
        if compare is not None and compare not in COMPARE_BUILTIN:
            other_campaign = store.resolve_campaign(compare)
            other_id = other_campaign["id"]
            theirs, _, more = completed_where(store, other_campaign, where)
            warnings += more
            other = _tables(store, other_id, theirs, ())
    for w in warnings:
        print(f"warning: {printable(w)}", file=sys.stderr)
    spooled = sum(1 for p in points if p["state"] == "spooled")
    if spooled:  # harvest reads only; campaign ingest folds spooled results in
        print(f"campaign {cid}: {spooled} point(s) have results waiting in spool files: run campaign ingest {cid}",
              file=sys.stderr)
    note = _not_harvested(cid, points)
    if note and tables:
        print(note, file=sys.stderr)
    if not tables:
        print(f"campaign {cid}: no completed point to harvest yet (see campaign status {cid})", file=sys.stderr)
        return 1
    if compare is not None:
        selected = [_comparison(compare, tables, other_id, other)]
        if selected[0][2].height == 0:
            print(f"campaign {cid}: nothing to compare with {compare} (no GPU count and series in common)",
                  file=sys.stderr)
            return 1
    else:
        selected = [(name, TITLES[name], tables[name]) for name in wanted]
    if fmt == "table" and out is None:
        print(f"campaign {cid}")
        selected = [(n, t, _printable_frame(_terminal(n, df))) for n, t, df in selected]
        if len(selected) == 1:
            print(f"{selected[0][1]}\n")
    for path in write_tables(selected, fmt, out):
        print(f"wrote {path}", file=sys.stderr)
    if plots is not None:
        from campaign.harvest.plots import write_figures

        paths = write_figures(plots, tables["scaling"], tables["throughput"], tables["utilisation"],
                              other=(other.get("scaling"), other.get("utilisation")) if other else None,
                              stack=tables.get("phase_stack"), hardware=tables.get("hardware"))
        print(f"wrote {len(paths)} figure files to {plots}", file=sys.stderr)
    return 0


def _comparison(compare: str, tables: dict, other_id: Optional[str], other: dict) -> tuple[str, str, pl.DataFrame]:
    if compare == "reference":
        from campaign.harvest.references import compare_reference

        return "reference", TITLES["reference"], compare_reference(tables["scaling"])
    from campaign.harvest.compare import compare_campaigns, compare_ideal

    if compare == "ideal":
        return "ideal", TITLES["ideal"], compare_ideal(tables["scaling"], tables["throughput"])
    if not other:
        return "campaign", TITLES["campaign"].format(other=other_id), pl.DataFrame()
    df = compare_campaigns((tables["scaling"], tables["throughput"]), (other["scaling"], other["throughput"]), other_id)
    return "campaign", TITLES["campaign"].format(other=other_id), df
