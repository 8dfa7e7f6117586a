"""The harvest command's body: read, derive, compare, export, draw."""

from __future__ import annotations

import math
import os
import sys
from typing import Optional, Sequence

import polars as pl

from campaign.common.errors import ConfigError
from campaign.common.outfile import check_output
from campaign.harvest.export import FORMATS, write_tables
from campaign.harvest.completed import completed_where  # noqa: F401  (harvest's callers import it from here)
from campaign.harvest.query import FILTERS, POINT_IDS
from campaign.harvest import tables as registry
from campaign.harvest.tables import TABLE_CHOICES, TABLES, build_tables, table_function
from campaign.harvest.xaxis import varying_names
from campaign.common.text import printable

COMPARE_BUILTIN = ("reference", "ideal")

# Titles of the comparisons (--compare); the tables' own are in tables.py.
TITLES = {
    "reference": "reference study (Garrett 2023): its stated figures beside measured values (difference = measured - "
                 "stated; an average beside the campaign's average over the same things; where each is stated: the "
                 "source column of --to csv/json)",
    "ideal": "ideal: measured values beside the ideal line (difference = measured - ideal)",
    "campaign": "campaign comparison: this campaign (measured) beside {other} (reference)",
}
# What the terminal shows of a comparison; a table's are in its registry entry.
TERMINAL_COLUMNS = {
    "reference": ["statement", "platform", "variant", "image", "gpus", "average_over", "platform_match", "measured",
                  "reference", "ideal", "difference", "holds", "note"],
}


def parse_where(items: Optional[Sequence[str]], where: Optional[dict] = None) -> dict:
    """Merge ``KEY=V1,V2`` filters into ``where`` (key -> values); values stay data, bound by the query.
    ``image=`` takes sha256 prefixes or image paths (``none``: points without a container)."""
    from campaign.harvest.where_settings import is_setting

    out = {k: list(v) for k, v in (where or {}).items()}
    for item in items or []:
        key, sep, values = item.partition("=")
        key = key.strip()
        if not sep or not (key in FILTERS or is_setting(key)) or not values:
            raise ConfigError(f"--where {item!r}: expected NAME=VALUE[,VALUE...] with NAME one of {', '.join(FILTERS)} "
                              f"or a point's setting (a dotted config key, e.g. trainer.params.backbone)")
        vals = [v.strip() for v in values.split(",") if v.strip()]
        if key in ("gpus", "nodes"):
            from campaign.common.numbers import parse_int64

            try:  # the store holds 64 bits: a longer integer is refused, never converted
                vals = [parse_int64(v, key) for v in vals]
            except ConfigError as exc:
                raise ConfigError(f"--where {item!r}: {key} takes integers ({exc})") from None
        out.setdefault(key, []).extend(vals)
    return out


# Spread over repeats: said only when some point ran more than once.
SPREAD = ("time_min_s", "time_max_s", "time_olympic_s", "iter_iqr_s")




def with_varying(df: pl.DataFrame, points: pl.DataFrame) -> pl.DataFrame:
    """``df`` with one column per varying override after ``variant`` (from the point
    frame's ``varying`` struct, matched on the series' ``variant`` label)."""
    from campaign.harvest.derive import VARYING

    if VARYING not in points.columns or "variant" not in df.columns or df.height == 0:
        return df
    values = points.select("variant", VARYING).unique("variant", maintain_order=True).unnest(VARYING)
    names = [c for c in values.columns if c != "variant"]
    joined = df.join(values, on="variant", how="left", nulls_equal=True)
    at = df.columns.index("variant") + 1
    return joined.select(df.columns[:at] + names + df.columns[at:])


def _terminal(name: str, df: pl.DataFrame) -> pl.DataFrame:
    shown = TABLES[name].terminal if name in TABLES else TERMINAL_COLUMNS.get(name)
    names = varying_names(df)
    cols = []
    for c in shown or df.columns:
        if c == "variant" and names:  # the values one column each, not folded into one label
            cols += names
        elif c in df.columns and c not in names:
            cols.append(c)
    for key in ("variant", "image"):  # a series key no point has says nothing
        if key in cols and df[key].fill_null("").eq("").all():
            cols.remove(key)
    if "dataset" in cols and df["dataset"].n_unique() == 1:  # one dataset: the exports name it, the rows need not
        cols.remove("dataset")
    if name != "placement" and "placement" in cols and "nodes" in df.columns and df["nodes"].max() == 1:
        cols.remove("placement")  # every point on one node: the GPU count says it all
    if "repeats" in df.columns and df["repeats"].max() == 1:
        cols = [c for c in cols if c not in SPREAD]
    if "note" in cols and df["note"].fill_null("").eq("").all():
        cols.remove("note")
    return df.select(cols)


def _not_harvested(cid: str, points: list[dict]) -> Optional[str]:
    """One line on the points harvest leaves out (not completed), or None."""
    from collections import Counter

    others = Counter(p["state"] for p in points if p["state"] != "completed")
    if not others:
        return None
    done = len(points) - sum(others.values())
    parts = ", ".join(f"{n} {state}" for state, n in sorted(others.items()))
    return f"campaign {cid}: {done} of {len(points)} point(s) completed; not harvested: {parts} (campaign status {cid})"


def _tables(store, campaign_id: str, where: Optional[dict], wanted: Sequence[str],
            stack: bool = False, efficiency_floor: Optional[float] = None) -> dict[str, pl.DataFrame]:
    """One campaign's tables (merged_tables)."""
    return merged_tables(store, [{"id": campaign_id}], where, wanted, stack, efficiency_floor)[0]


def merged_tables(store, campaigns: Sequence[dict], where: Optional[dict], wanted: Sequence[str],
                  stack: bool = False, efficiency_floor: Optional[float] = None
                  ) -> tuple[dict[str, pl.DataFrame], list[str]]:
    """The tables of the campaigns' completed points as one frame (colliding points: the newer
    attempt wins, campaign.harvest.several.newest_wins) and the notes of the points left out;
    ``stack``: also the breakdown figure's stack (study_timing.timing_stack);
    ``efficiency_floor``: the model table's knee at this floor, not its registered default."""
    from campaign.harvest.derive import engine_phases, point_frame
    from campaign.harvest.several import names_of, newest_wins
    from campaign.harvest.study_timing import timing_stack

    if where is not None and where.get(POINT_IDS) == []:
        return {}, []
    points = point_frame(store, [c["id"] for c in campaigns], where)
    if points.height == 0:
        return {}, []
    notes: list[str] = []
    if len(campaigns) > 1:
        points, notes = newest_wins(points, names_of(campaigns))
    # what comparisons and figures read, beside the tables asked for
    names = ["scaling", "throughput", "utilisation", *wanted]
    if stack:
        names += ["hardware", "placement"]
    from campaign.harvest.epochs import with_epoch_times

    phases = engine_phases(store, points["attempt_id"].to_list())  # epoch times (epoch_s) read them too
    points = with_epoch_times(points, phases)
    floored = efficiency_floor is not None and "model" in names
    out = build_tables(dict.fromkeys(n for n in names if not (floored and n == "model")), points, phases)
    if floored:
        from campaign.harvest.model import fit_model

        out["model"] = fit_model(points, efficiency_floor)
    if stack:
        out["phase_stack"] = timing_stack(points, phases)  # the study's own timings where a point has them
    return {name: with_varying(df, points) for name, df in out.items()}, notes


def harvest(ref: Optional[str] | Sequence[str], *, store_url: str, fmt: str = "table", out: Optional[str] = None,
            where: Optional[dict] = None, table: str = "scaling", compare: Optional[str] = None,
            plots: Optional[str] = None, where_items: Optional[Sequence[str]] = None,
            loss_threshold: Optional[float] = None, efficiency_floor: Optional[float] = None,
            x: Optional[str] = None, raw: bool = False) -> int:
    """Harvest a campaign, or several as one (``ref``: a reference or a list of them; a name
    several campaigns share: all of them; campaign.harvest.several): print or write its tables
    (or a comparison), draw its figures
    (``x``: what time, speedup, efficiency, throughput and the breakdown are drawn against;
    ``raw``: CSV and markdown text cells as stored, campaign.harvest.export)."""
    from campaign.harvest.several import completed_over, label, resolve_campaigns
    from campaign.store import find_campaign_noted, open_store

    refs = [] if ref is None else [ref] if isinstance(ref, str) else list(ref)
    if fmt not in FORMATS:
        raise ConfigError(f"unknown format '{fmt}'; available: {', '.join(FORMATS)}")
    if table not in TABLE_CHOICES:
        raise ConfigError(f"unknown table '{table}'; available: {', '.join(TABLE_CHOICES)}")
    where = parse_where(where_items, where)
    if loss_threshold is not None and table != "convergence":
        raise ConfigError(f"--loss-threshold goes with --table convergence, not --table {table}")
    if loss_threshold is not None and not math.isfinite(loss_threshold):  # nan: no loss is ever below it
        raise ConfigError(f"--loss-threshold {loss_threshold}: give a finite number, e.g. 0.5")
    if x is not None and plots is None:
        raise ConfigError(f"--x {x} sets the figures' x axis; add --plots DIR")
    if out is not None and not os.path.isdir(out):  # a file: refused before the store is read, as report does
        check_output(out)  # a link, FIFO or store there (campaign.common.outfile); written the same way
    if efficiency_floor is not None:
        if table not in ("model", "all"):
            raise ConfigError(f"--efficiency-floor goes with --table model (or all), not --table {table}")
        if not 0 < efficiency_floor <= 1:
            raise ConfigError(f"--efficiency-floor {efficiency_floor}: give a number in (0, 1], e.g. 0.8")
    if table in TABLES and not TABLES[table].of_points:
        options = {"loss_threshold": loss_threshold} if loss_threshold is not None else {}
        if "image" in where:  # an attempt's image is the point tables' filter (the attempt they read)
            raise ConfigError(f"--where image= narrows the tables of completed points, not --table {table}; "
                              f"use --where with {', '.join(k for k in FILTERS if k != 'image')}")
        return _campaign_table(table, refs, store_url, fmt, out, options, plots, where, raw=raw)
    wanted = registry.POINT_TABLES if table == "all" else (table,)  # read now: a table registered later counts
    other_id, other = None, {}
    with open_store(store_url, readonly=True) as store:
        campaigns = resolve_campaigns(store, refs)  # a name several share: all of them, said on stderr
        campaign = campaigns[0] if len(campaigns) == 1 else None
        if campaign is not None:
            mine, points, warnings = completed_where(store, campaign, where)
            each = {campaign["id"]: points}
        else:
            mine, each, warnings = completed_over(store, campaigns, where)
            points = [p for theirs in each.values() for p in theirs]
        tables, collided = merged_tables(store, campaigns, mine, wanted, stack=plots is not None,
                                         efficiency_floor=efficiency_floor)
        if compare is not None and compare not in COMPARE_BUILTIN:
            other_campaign = find_campaign_noted(store, compare)
            other_id = other_campaign["id"]
            theirs, _, more = completed_where(store, other_campaign, where)
            warnings += more
            other = _tables(store, other_id, theirs, ())
    for w in warnings:
        print(f"warning: {printable(w)}", file=sys.stderr)
    for cid, theirs in each.items():
        spooled = sum(1 for p in theirs if p["state"] == "spooled")
        if spooled:  # harvest reads only; campaign ingest folds spooled results in
            print(printable(f"campaign {cid}: {spooled} point(s) have results waiting in spool files: "
                            f"run campaign ingest {cid}"), file=sys.stderr)
        note = _not_harvested(cid, theirs)
        if note and tables:
            print(printable(note), file=sys.stderr)
    for note in collided:  # several campaigns: the points left out for a newer attempt
        print(printable(f"note: {note}"), file=sys.stderr)
    named = label(campaigns)
    if not tables:
        print(printable(f"{named}: no completed point to harvest yet (see campaign status "
                        f"{' / '.join(each)})"), file=sys.stderr)
        return 1
    x_column = None
    if plots is not None:  # refused before anything is written
        from campaign.harvest.xaxis import resolve_x

        x_column = resolve_x(x, tables["scaling"])
    shows_reference = compare == "reference" or (compare is None and table == "scaling" and fmt == "table"
                                                 and out is None and study_reference(points))
    if shows_reference:
        from campaign.harvest.references import workload_warning

        differs = workload_warning(points)
        if differs:
            print(f"warning: {printable(differs)}", file=sys.stderr)
    if compare is not None:
        selected = [_comparison(compare, tables, other_id, other)]
        if selected[0][2].height == 0:
            print(printable(f"{named}: nothing to compare with {compare} (no GPU count and series in common)"),
                  file=sys.stderr)
            return 1
    else:
        if table != "all" and TABLES[table].optional and tables[table].height == 0:
            print(printable(f"{named}: {TABLES[table].empty}"), file=sys.stderr)
            return 1
        # --table all: an optional table (placement) only where it has rows
        selected = [(name, _title(name, efficiency_floor), tables[name]) for name in wanted
                    if name == table or not TABLES[name].optional or tables[name].height]
    if fmt == "table" and out is None:
        print(printable(named))
        if shows_reference and compare is None:
            selected.append(_comparison("reference", tables, None, {}))  # a study preset's: its figures beside
        selected = [(n, t, _terminal(n, df)) for n, t, df in selected]  # escaped by write_tables (stdout)
        if len(selected) == 1:
            print(f"{selected[0][1]}\n")
    for path in write_tables(selected, fmt, out, raw=raw):
        print(printable(f"wrote {path}"), file=sys.stderr)
    if plots is not None:
        from campaign.harvest.figures import write_figures
        from campaign.harvest.study_style import style_of

        paths = write_figures(plots, tables["scaling"], tables["throughput"], tables["utilisation"],
                              other=(other.get("scaling"), other.get("utilisation")) if other else None,
                              stack=tables.get("phase_stack"), hardware=tables.get("hardware"),
                              placement=tables.get("placement"), campaign=campaign, x=x_column,
                              style=style_of(points))
        from campaign.harvest.figures import write_table_figures

        for name in wanted:  # a point table's own figures (the fitted model's), where it registers some
            paths += write_table_figures(plots, name, tables[name], campaign=campaign)
        print(printable(f"wrote {len(paths)} figure files to {plots}"), file=sys.stderr)
    return 0


def study_reference(points: Sequence[dict]) -> bool:
    """Whether every completed point was launched by a study preset whose published figures
    are the reference's (``study.reference``): its terminal harvest lays them beside its own."""
    done = [p for p in points if p.get("state") == "completed"]
    return bool(done) and all(((p.get("config") or {}).get("study") or {}).get("reference") for p in done)


def _title(name: str, efficiency_floor: Optional[float]) -> str:
    """A table's title; the model's knee at the floor asked for (``--efficiency-floor``)."""
    title = TABLES[name].title
    if name == "model" and efficiency_floor is not None:
        title = title.replace("efficiency >= 0.8", f"efficiency >= {efficiency_floor:g}")
    return title


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


def _campaign_table(name: str, refs: Sequence[str], store_url: str, fmt: str, out: Optional[str],
                    options: Optional[dict] = None, plots: Optional[str] = None, where: Optional[dict] = None,
                    raw: bool = False) -> int:
    """A table built from the store and the campaign, not its completed points (``attempts``:
    every attempt, whatever its state; campaign/harvest/attempts.py), narrowed to the points
    ``where`` (--gpus, --platform, --where) selects, by their ``idx``. Several campaigns: one
    table, each row with its ``campaign_id`` first (a point's idx is its campaign's)."""
    from campaign.harvest.several import label, resolve_campaigns
    from campaign.store import open_store

    title = TABLES[name].title
    with open_store(store_url, readonly=True) as store:
        campaigns = resolve_campaigns(store, refs)  # another user's said on stderr; typed at the door (campaign.store.typed)
        frames, warnings = [], []
        for campaign in campaigns:
            df, more = _one_campaign_table(store, campaign, name, options, where)
            frames.append(df)
            warnings += more
    if len(campaigns) == 1:
        df = frames[0]
    else:
        frames = [f.select(pl.lit(c["id"]).alias("campaign_id"), pl.all()) for c, f in zip(campaigns, frames)]
        df = pl.concat(frames, how="diagonal_relaxed")
    for w in warnings:
        print(f"warning: {printable(w)}", file=sys.stderr)
    if fmt == "table" and out is None:
        print(printable(label(campaigns)), title, "", sep="\n")
    for path in write_tables([(name, title, df)], fmt, out, raw=raw):
        print(printable(f"wrote {path}"), file=sys.stderr)
    if plots is not None:
        from campaign.harvest.figures import write_table_figures

        paths = write_table_figures(plots, name, df, campaign=campaigns[0] if len(campaigns) == 1 else None)
        print(printable(f"wrote {len(paths)} figure files to {plots}"), file=sys.stderr)
    return 0


def _one_campaign_table(store, campaign: dict, name: str, options: Optional[dict],
                        where: Optional[dict]) -> tuple[pl.DataFrame, list[str]]:
    """One campaign's ``name`` table (_campaign_table) and the warnings of reading it."""
    from campaign.harvest.query import point_indices_query
    from campaign.harvest.where_settings import matching_ids, split
    from campaign.store.typed import typed_points

    where, settings = split(where)
    df, warnings = table_function(name)(store, campaign, **(options or {}))
    if where:
        with store.engine.connect() as conn:
            chosen = [r[0] for r in conn.execute(point_indices_query(campaign["id"], where))]
        df = df.filter(pl.col("idx").is_in(chosen))
    if settings:
        points = typed_points(campaign["id"], store.points(campaign["id"]))[0]
        df = df.filter(pl.col("idx").is_in(list(matching_ids(points, settings, campaign["id"], "idx"))))
    return df, list(warnings)
