"""Several campaigns read as one (issue #46): a node sweep launched one node count at a time
makes one table, one figure, one report.

``campaign harvest``, ``figures`` and ``report`` take campaign references (ids, id prefixes,
names); a name several campaigns share is every one of them (resolve_campaigns). Their
completed points make one frame; where two campaigns' points collide (COLLIDE_ON: the same
series, GPU count, nodes and repeat) the newer attempt wins and a note says which was left
out (newest_wins). One rule, one note wording, for every command. The store is only read.
"""

from __future__ import annotations

import sys
from typing import Optional, Sequence

import polars as pl

from campaign.common.text import printable
from campaign.harvest.query import POINT_IDS

# a point's identity in a frame: two campaigns' points alike in these collide
COLLIDE_ON = ("platform", "trainer", "experiment", "dataset", "variant", "gpus", "nodes", "repeat")


def resolve_campaigns(store, refs: Sequence[str]) -> list[dict]:
    """The campaigns ``refs`` name (none: the latest); a name several campaigns share is every
    one of them (a sweep launched in parts), oldest first, said in a note on stderr; each
    campaign once. An unknown reference raises NotFoundError (one line, exit 2)."""
    from campaign.store import find_campaign_noted

    for ref in refs:  # every reference checked before any note: an unknown one is the one line said
        store.find_campaign(ref)
    found: dict[str, dict] = {}
    for ref in refs or [None]:
        shared = [c for c in store.candidates(ref) if c.get("name") == ref] if ref else []
        if len(shared) > 1:
            shared.sort(key=lambda c: (c.get("created_at") or 0, c["id"]))
            print(printable(f"note: '{ref}' names {len(shared)} campaigns; reading all of them as one: "
                            f"{', '.join(c['id'] for c in shared)} (an id picks one)"), file=sys.stderr)
            chosen = [_typed(c) for c in shared]
        else:
            chosen = [find_campaign_noted(store, ref)]
        for c in chosen:
            found.setdefault(c["id"], c)
    return list(found.values())


def _typed(row: dict) -> dict:
    """A campaign row typed at the door, as find_campaign_noted types the one it finds."""
    from campaign.store.typed import typed_campaign

    row, warnings = typed_campaign(row)
    for w in warnings:
        print(f"warning: {printable(w)}", file=sys.stderr)
    return row


def label(campaigns: Sequence[dict]) -> str:
    """``campaign ID`` or ``campaigns ID, ID``: what a message or a table's head names."""
    ids = [c["id"] for c in campaigns]
    return f"campaign {ids[0]}" if len(ids) == 1 else f"campaigns {', '.join(ids)}"


def completed_over(store, campaigns: Sequence[dict], where: Optional[dict]
                   ) -> tuple[dict, dict[str, list[dict]], list[str]]:
    """``where`` narrowed to the completed points of each campaign (completed.completed_where), as
    one filter over them all (an id list), with each campaign's effective points and the
    warnings of reading them."""
    from campaign.harvest.completed import completed_where
    from campaign.observe.state import completed_ids

    ids: list[int] = []
    warnings: list[str] = []
    points: dict[str, list[dict]] = {}
    out: dict = {}
    for campaign in campaigns:
        mine, theirs, more = completed_where(store, campaign, where)
        warnings += more
        points[campaign["id"]] = theirs
        ids += mine[POINT_IDS] if POINT_IDS in mine else completed_ids(theirs)
        out = {k: v for k, v in mine.items() if k != POINT_IDS}
    out[POINT_IDS] = ids
    return out, points, warnings


def selected_ids(store, campaigns: Sequence[dict], where: dict) -> tuple[dict, list[str]]:
    """``where`` split into the point-column filters and the ids of the campaigns' completed
    points that hold its settings (completed_over), with the warnings of reading their states."""
    out, _, warnings = completed_over(store, campaigns, where)
    return out, warnings


def newest_wins(points: pl.DataFrame, names: dict[str, str]) -> tuple[pl.DataFrame, list[str]]:
    """Points of several campaigns with colliding keys (COLLIDE_ON): the newest attempt's kept
    (the larger attempt id: attempts are numbered as they are made), a note per point left out
    (``names``: campaign id -> its name, for the note)."""
    keys = [k for k in COLLIDE_ON if k in points.columns]
    if points.height == 0 or "campaign_id" not in points.columns or points["campaign_id"].n_unique() < 2:
        return points, []
    ranked = points.with_columns(pl.col("attempt_id").rank("ordinal", descending=True).over(keys).alias("_rank"))
    dropped = ranked.filter(pl.col("_rank") > 1)
    notes = []
    for row in dropped.iter_rows(named=True):
        winner = ranked.filter(pl.all_horizontal([pl.col(k).eq_missing(row[k]) for k in keys])
                               & (pl.col("_rank") == 1)).row(0, named=True)
        what = " ".join(str(row[k]) for k in ("platform", "experiment", "dataset", "variant") if row.get(k))
        notes.append(f"{what} at {row['gpus']} GPU(s): campaign {winner['campaign_id']}"
                     f"{_named(names, winner['campaign_id'])}'s newer attempt wins over campaign "
                     f"{row['campaign_id']}{_named(names, row['campaign_id'])}'s")
    return ranked.filter(pl.col("_rank") == 1).drop("_rank"), notes


def _named(names: dict[str, str], cid: str) -> str:
    return f" ({names[cid]})" if names.get(cid) else ""


def names_of(campaigns: Sequence[dict]) -> dict[str, str]:
    """Campaign id -> its name ("" without one), for newest_wins' notes."""
    return {c["id"]: c.get("name") or "" for c in campaigns}
