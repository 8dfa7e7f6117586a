"""The harvest command's body: read, derive, export."""

from __future__ import annotations

import sys
from typing import Optional

from campaign.errors import ConfigError
from campaign.harvest.derive import point_frame, scaling_table
from campaign.harvest.export import FORMATS, write
from campaign.store import open_store

# What the terminal table shows; the exports carry every column.
TABLE_COLUMNS = ["platform", "trainer", "experiment", "variant", "gpus", "repeats", "batch_per_gpu", "iterations",
                 "time_s", "images_per_s", "speedup", "efficiency", "gpu_util", "cpu_util", "note"]


def harvest(ref: Optional[str], *, store_url: str, fmt: str = "table", out: Optional[str] = None,
            where: Optional[dict] = None) -> int:
    if fmt not in FORMATS:
        raise ConfigError(f"unknown format '{fmt}'; available: {', '.join(FORMATS)}")
    with open_store(store_url) as store:
        campaign = store.resolve_campaign(ref)
        points = point_frame(store, [campaign["id"]], where)
    table = scaling_table(points)
    if table.height == 0:
        print(f"campaign {campaign['id']}: no completed point to harvest yet (see campaign status {campaign['id']})",
              file=sys.stderr)
        return 1
    if fmt == "table" and out is None:
        print(f"campaign {campaign['id']}: time = training time (slowest rank, median over repeats); "
              "speedup = T(1)/T(N) on the same platform; efficiency = speedup/N\n")
        table = table.select([c for c in TABLE_COLUMNS if c in table.columns])
    path = write(table, fmt, out)
    if path is not None:
        print(f"wrote {path} ({table.height} rows)", file=sys.stderr)
    return 0
