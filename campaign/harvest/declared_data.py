"""The points and harvested tables behind a declared item (declared.py), from one or several
campaigns of a study: the completed points that pass the item's filters (a point column or a
dotted setting, as ``campaign harvest --where``), harvest's own tables of them (scaling,
utilisation, throughput, the study's timing stack), and the convergence rows of those points.

Several campaigns make one frame: a node sweep launched one node count at a time is one
figure. Where two campaigns' points collide (the same series, GPU count, nodes and repeat) the
newer attempt wins and a note says which was left out (campaign.harvest.several, the rule
harvest and report follow too). The store is read, never written.
"""

from __future__ import annotations

from typing import Optional, Sequence

import polars as pl

from campaign.harvest.convergence import WINDOWS
from campaign.harvest.query import POINT_IDS
from campaign.harvest.several import names_of, newest_wins, selected_ids


class Harvest:
    """What the campaigns give the declared items, built once per set of filters."""

    def __init__(self, store, campaigns: Sequence[dict]):
        self.store = store
        self.campaigns = list(campaigns)
        self.names = names_of(self.campaigns)
        self.warnings: list[str] = []
        self._tables: dict = {}
        self._convergence: dict[Optional[int], pl.DataFrame] = {}  # per window count (None: every iteration)

    def tables(self, where: dict) -> tuple[dict[str, pl.DataFrame], list[str]]:
        """(harvest's tables of the points passing ``where``, the collision notes); {} without
        a point. Tables: points, scaling, throughput, utilisation, phase_stack (the study's
        own timings where a point has them: study_timing.timing_stack)."""
        key = repr(sorted((k, tuple(v)) for k, v in where.items()))
        if key not in self._tables:
            self._tables[key] = self._build(where)
        return self._tables[key]

    def _build(self, where: dict) -> tuple[dict[str, pl.DataFrame], list[str]]:
        from campaign.harvest.derive import engine_phases, point_frame
        from campaign.harvest.epochs import with_epoch_times
        from campaign.harvest.run import with_varying
        from campaign.harvest.study_timing import timing_stack
        from campaign.harvest.tables import build_tables

        filters, warnings = selected_ids(self.store, self.campaigns, where)
        self.warnings += [w for w in warnings if w not in self.warnings]
        if not filters[POINT_IDS]:
            return {}, []
        points = point_frame(self.store, [c["id"] for c in self.campaigns], filters)
        if points.height == 0:
            return {}, []
        points, notes = newest_wins(points, self.names)
        phases = engine_phases(self.store, points["attempt_id"].to_list())
        points = with_epoch_times(points, phases)
        out = build_tables(["scaling", "throughput", "utilisation"], points, phases)
        out["phase_stack"] = timing_stack(points, phases)
        out = {name: with_varying(df, points) for name, df in out.items()}
        out["points"] = points
        return out, notes

    def convergence(self, where: dict, windows: Optional[int] = WINDOWS) -> pl.DataFrame:
        """The convergence rows (campaign.harvest.convergence) of the points passing ``where``,
        with each point's varying settings as columns (``windows``: window rows per point,
        None: one per iteration)."""
        from campaign.harvest.convergence import convergence_table

        tables, _ = self.tables(where)
        if not tables:
            return pl.DataFrame()
        if windows not in self._convergence:
            frames = []
            for campaign in self.campaigns:
                df, warnings = convergence_table(self.store, campaign, windows=windows)
                self.warnings += [w for w in warnings if w not in self.warnings]
                frames.append(df.with_columns(pl.lit(campaign["id"]).alias("campaign_id")))
            self._convergence[windows] = pl.concat(frames, how="diagonal_relaxed") if frames else pl.DataFrame()
        points = tables["points"]
        keep = points.select("campaign_id", "idx", pl.col("dataset").alias("point_dataset")).unique(["campaign_id", "idx"])
        rows = self._convergence[windows].join(keep, on=["campaign_id", "idx"], how="inner")
        from campaign.harvest.derive import VARYING

        if VARYING in points.columns:  # the settings that vary between the item's points, one column each
            settings = points.select("campaign_id", "idx", VARYING).unnest(VARYING)
            rows = rows.join(settings, on=["campaign_id", "idx"], how="left")
        return rows
