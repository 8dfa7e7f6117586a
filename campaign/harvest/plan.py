"""``campaign plan``: from a harvested (pilot) campaign to the full runs worth their GPU-hours.

For each series and GPU count, measured or predicted by the fitted model (model.py; a
series with too few GPU counts to fit contributes its measured points only), the full
schedule's time to solution and GPU-hours (time x GPUs). Then the fastest choice within
a GPU-hour budget and the cheapest within a deadline, and with ``--launch`` the
``campaign launch`` line of each choice, printed, never run. Reads the store only.
"""

from __future__ import annotations

import sys
from typing import Optional

import polars as pl

from campaign.common.errors import ConfigError
from campaign.common.text import printable
from campaign.harvest.launchline import UnsafeWord, launch_line, series_overrides

KEYS = ["platform", "trainer", "experiment", "dataset", "variant", "image", "span"]
SHOWN = KEYS + ["gpus", "kind", "time_h", "gpu_hours"]


def candidates(model: pl.DataFrame, scaling: Optional[pl.DataFrame] = None) -> pl.DataFrame:
    """Per series and GPU count: the full schedule's ``time_h`` and ``gpu_hours``, with
    ``kind`` measured (a fitted series at a measured N, or a measured point of a series
    without a fit) or predicted. Rows: model's table; unfitted series from ``scaling``."""
    fitted = model.filter(pl.col("kind") != "no fit") if model.height else model
    parts = []
    if fitted.height:
        parts.append(fitted.select(KEYS + ["gpus", "kind", (pl.col("time_s") / 3600.0).alias("time_h"),
                                           "gpu_hours"]))
    if scaling is not None and scaling.height and model.height:
        unfit = model.filter(pl.col("kind") == "no fit").select(KEYS)
        s = scaling.with_columns(pl.when(pl.col("nodes") > 1).then(pl.lit("inter-node"))
                                 .otherwise(pl.lit("intra-node")).alias("span"))
        s = s.join(unfit, on=KEYS, how="semi", nulls_equal=True)
        if s.height:
            parts.append(s.select(KEYS + [pl.col("gpus").cast(pl.Int64), pl.lit("measured").alias("kind"),
                                          (pl.col("time_s") / 3600.0).alias("time_h"),
                                          (pl.col("time_s") * pl.col("gpus") / 3600.0).alias("gpu_hours")]))
    if not parts:
        return pl.DataFrame(schema={c: pl.Utf8 for c in SHOWN})
    rows = pl.concat(parts, how="vertical_relaxed").sort(KEYS + ["gpus"], nulls_last=True)
    return _with_nodes(rows, scaling)


def _with_nodes(rows: pl.DataFrame, scaling: Optional[pl.DataFrame]) -> pl.DataFrame:
    """``rows`` with ``nodes``: a measured N's own node count; a predicted N of an
    inter-node series as many nodes as it needs at the GPUs per node of the series'
    largest measured N (an inter-node choice launched without ``nodes=`` would run on
    one node, or be refused: not the placement the model measured or predicted)."""
    if scaling is None or not scaling.height or "nodes" not in scaling.columns:
        return rows.with_columns(pl.lit(None, dtype=pl.Int64).alias("nodes"))
    placed = (scaling.with_columns(pl.when(pl.col("nodes") > 1).then(pl.lit("inter-node"))
                                   .otherwise(pl.lit("intra-node")).alias("span"))
              .group_by(KEYS + [pl.col("gpus").cast(pl.Int64)]).agg(pl.col("nodes").max().cast(pl.Int64)))
    per_node = (placed.sort("gpus").group_by(KEYS, maintain_order=True)
                .agg((pl.col("gpus").last() / pl.col("nodes").last()).alias("_per_node")))
    out = (rows.with_columns(pl.col("gpus").cast(pl.Int64))
           .join(placed, on=KEYS + ["gpus"], how="left", nulls_equal=True)
           .join(per_node, on=KEYS, how="left", nulls_equal=True))
    predicted = (pl.col("gpus") / pl.col("_per_node")).ceil().cast(pl.Int64)
    return out.with_columns(
        pl.coalesce("nodes", pl.when(pl.col("span") == "inter-node").then(predicted).otherwise(pl.lit(1)))
        .alias("nodes")).drop("_per_node")


def choose(rows: pl.DataFrame, hours: Optional[float], budget: Optional[float]) -> dict:
    """The fastest row within ``budget`` GPU-hours and the cheapest within ``hours``
    (each None where not asked for or where no row fits)."""
    out = {}
    if budget is not None:
        fit = rows.filter(pl.col("gpu_hours") <= budget)
        out["fastest"] = fit.sort(["time_h", "gpu_hours"]).row(0, named=True) if fit.height else None
    if hours is not None:
        fit = rows.filter(pl.col("time_h") <= hours)
        out["cheapest"] = fit.sort(["gpu_hours", "time_h"]).row(0, named=True) if fit.height else None
    return out


def _describe(row: dict, datasets: int = 1) -> str:
    where = " ".join(f"{k}={row[k]}" for k in ("platform", "trainer", "experiment", "variant") if row.get(k))
    if datasets > 1:
        where += f" on {row['dataset']}"
    return (f"{where} gpus={row['gpus']} ({row['kind']}): {row['time_h']:.3g} h, "
            f"{row['gpu_hours']:.3g} GPU-hours")


def plan(ref: Optional[str], *, store_url: str, hours: Optional[float] = None, budget: Optional[float] = None,
         launch: bool = False, efficiency_floor: float = 0.8) -> int:
    """Print the campaign's plan: every candidate, then the choices asked for; 0, or 1
    when nothing completed or no candidate fits the deadline or budget."""
    from campaign.harvest.derive import point_frame
    from campaign.harvest.export import write_tables
    from campaign.harvest.model import fit_model
    from campaign.harvest.query import POINT_IDS
    from campaign.harvest.run import completed_where
    from campaign.harvest.views import scaling_table
    from campaign.store import find_campaign_noted, open_store

    for name, value in (("--hours", hours), ("--budget", budget)):
        if value is not None and not 0 < value < float("inf"):
            raise ConfigError(f"{name} {value}: give a positive, finite number")
    if not 0 < efficiency_floor <= 1:
        raise ConfigError(f"--efficiency-floor {efficiency_floor}: give a number in (0, 1], e.g. 0.8")
    with open_store(store_url, readonly=True) as store:
        campaign = find_campaign_noted(store, ref)
        cid = campaign["id"]
        mine, _, warnings = completed_where(store, campaign, None)
        points = point_frame(store, [cid], mine) if mine.get(POINT_IDS) != [] else pl.DataFrame()
        stored = store.points(cid) if launch else []
    for w in warnings:
        print(f"warning: {printable(w)}", file=sys.stderr)
    if points.height == 0:
        print(printable(f"campaign {cid}: no completed point to plan from yet (see campaign status {cid})"),
              file=sys.stderr)
        return 1
    model = fit_model(points, efficiency_floor)
    rows = candidates(model, scaling_table(points))
    unfit = model.filter(pl.col("kind") == "no fit") if model.height else model  # none fitted: no columns either
    for note in (unfit["note"].unique(maintain_order=True).to_list() if unfit.height else []):
        print(printable(f"note: {note}; its measured points only"), file=sys.stderr)
    print(printable(f"campaign {cid}"))
    print("plan: the full schedule's time to solution (hours) and GPU-hours per platform and GPU count; "
          "kind predicted: from the fitted model (campaign harvest --table model)\n")
    datasets = rows["dataset"].n_unique() if "dataset" in rows.columns else 1
    shown = rows.select([c for c in SHOWN if c in rows.columns and not (
        c in ("variant", "image") and rows[c].fill_null("").eq("").all()) and not (c == "dataset" and datasets < 2)])
    write_tables([("plan", "plan", shown)], "table", None)
    chosen = choose(rows, hours, budget)
    status = 0
    for what, label in (("fastest", f"fastest within {budget} GPU-hours"),
                        ("cheapest", f"cheapest within {hours} hours")):
        if what not in chosen:
            continue
        row = chosen[what]
        if row is None:
            print(printable(f"{label}: none (loosen the {'budget' if what == 'fastest' else 'deadline'})"))
            status = 1
            continue
        print(printable(f"{label}: {_describe(row, datasets)}"))
        if launch:
            overrides, note = series_overrides(row, points, stored, campaign)
            if note:
                print(printable(note), file=sys.stderr)
            try:
                print(printable(launch_line(row, overrides)))
            except UnsafeWord as exc:
                print(printable(f"note: no launch line for this choice: a stored value cannot stand on it ({exc})"),
                      file=sys.stderr)
    return status
