"""Points whose stored JSON is too long for the store's own JSON functions (issue #48).

Harvest's SQL reads a few figures out of stored JSON in the database (campaign.harvest.query:
an attempt's container image from its provenance, a rank's ``extra`` figures, the profiler
window's warning and trace files), and hands a value to a JSON function only when it is at
most ``sql_max_chars()`` long (campaign.common.bounded): a longer one reads as NULL. A point
whose harvested attempt holds such a value would be harvested without the figures it
carries (its image among them: it would join the series of points run without a container),
so harvest leaves it out, in one warning line naming the point, the value and the bound."""

from __future__ import annotations

from typing import Any, Sequence

from campaign.common.bounded import STORED, sql_max_chars
from campaign.common.text import printable
from campaign.store.typed import LEFT_OUT


def oversized_points(store: Any, campaign_id: str, points: Sequence[dict]) -> dict[int, str]:
    """point id -> one warning line (ending with ``LEFT_OUT``) for each of ``points`` whose
    latest completed attempt holds stored JSON longer than the store's JSON functions may
    parse (``campaign.harvest.query.oversized_json_query``: lengths only are read)."""
    from campaign.harvest.query import oversized_json_query

    idx = {p["id"]: p.get("idx") for p in points}
    out: dict[int, str] = {}
    with store.engine.connect() as conn:
        rows = conn.execute(oversized_json_query(campaign_id)).all()
    for point_id, what, rank, size in rows:
        if point_id not in idx or point_id in out:
            continue
        of_rank = f" (rank {printable(rank)})" if rank is not None else ""
        out[point_id] = (f"point #{idx[point_id]} (id {point_id}) of campaign {printable(campaign_id)}: its {what}"
                         f"{of_rank} holds {_count(size)} characters, more than the {sql_max_chars():,} the store's "
                         f"JSON functions may parse ({STORED.env}){LEFT_OUT}")
    return out


def _count(size: Any) -> str:
    return f"{size:,}" if isinstance(size, int) and not isinstance(size, bool) else printable(size)
