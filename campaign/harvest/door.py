"""The stored rows harvest's SQL aggregates, checked before it reads them (issue #48).

Harvest reads its figures in the database: SQL aggregates over an attempt's ranks
(campaign.harvest.query) and a few figures read out of stored JSON there (an attempt's
container image from its provenance, a rank's ``extra`` figures, the profiler window's
``top_ops``). A store is shared, and SQLite keeps any value in any column: ``'abc'`` in
``rank_timing.wall_s`` averages as 0 and ends harvest's frame in a polars error; a 180 MB
``[{},{},...]`` in one ``extra`` took SQLite 1.48 GB to parse. So before the harvest, the
points whose latest completed attempt (the one harvest reads) holds

- stored JSON longer than ``sql_max_chars()`` (campaign.common.bounded: the longest value
  whose parse could not pass the command's JSON budget; the SQL itself reads such a value
  as NULL, never parsing it: ``guarded``), or
- a value of another type than its column's in a row harvest aggregates (rank_timing,
  profile, breakdown, evaluation: a number column holding text or a blob, a real in an
  integer column, a name column a blob; of the iterations, a million rows, the seconds
  harvest's projection reads, from the index it reads them by; convergence.py types the
  rest it reads; SQLite only: PostgreSQL's columns are typed on write)

are left out, each in one warning line naming the point, the column and the bound. Only
lengths and types are read, never the values."""

from __future__ import annotations

from typing import Any, Sequence

from sqlalchemy import JSON, Boolean, Float, Integer, String, and_, case, func, literal, select

from campaign.common.bounded import STORED, sql_max_chars
from campaign.common.text import printable
from campaign.store.typed import LEFT_OUT
from campaign_sql.schema import EVALUATION_SINCE, attempt, breakdown, evaluation, iteration, point, profile, rank_timing

# SQLite's typeof() each column type may hold (null: every one), and a value of each type in words
_KINDS = {"integer": "an integer", "real": "a real number", "text": "text", "blob": "a blob"}
_TYPES = ((Boolean, ("integer",)), (Integer, ("integer",)), (Float, ("integer", "real")), (String, ("text",)))


def left_out(store: Any, campaign_id: str, points: Sequence[dict]) -> dict[int, str]:
    """point id -> one warning line (ending with ``LEFT_OUT``) for each of ``points`` whose
    latest completed attempt holds what harvest's SQL does not read (the module says what)."""
    idx = {p["id"]: p.get("idx") for p in points}
    if not idx:
        return {}
    out: dict[int, str] = {}
    latest = _latest(campaign_id)
    with store.engine.connect() as conn:
        for point_id, what, rank, size in conn.execute(_oversized(latest)).all():
            if point_id in idx and point_id not in out:
                out[point_id] = (f"{_named(campaign_id, point_id, idx)}: its {what}{_of_rank(rank)} holds {_count(size)} "
                                 f"characters, more than the {sql_max_chars():,} the store's JSON functions may parse "
                                 f"({STORED.env}){LEFT_OUT}")
        if store.engine.dialect.name == "sqlite":
            tables = [rank_timing, profile, breakdown, iteration] + ([evaluation] if store.has(EVALUATION_SINCE) else [])
            for table in tables:
                for point_id, what in conn.execute(_mistyped(latest, table)).all():
                    if what is not None and point_id in idx and point_id not in out:
                        column, _, kind = str(what).partition(" ")
                        out[point_id] = (f"{_named(campaign_id, point_id, idx)}: its {table.name}.{column} holds "
                                         f"{_KINDS.get(kind, 'a value')}, not {_expected(table.c[column])}{LEFT_OUT}")
    return out


def _latest(campaign_id: str):
    """CTE ``latest``: id, point_id and provenance length of each point's latest completed attempt."""
    from campaign.harvest.query import json_size

    last = (select(attempt.c.point_id, func.max(attempt.c.attempt_no).label("attempt_no"))
            .join_from(attempt, point, point.c.id == attempt.c.point_id)
            .where(point.c.campaign_id == campaign_id, attempt.c.state == "completed")
            .group_by(attempt.c.point_id).subquery("last_completed"))
    return (select(attempt.c.id, attempt.c.point_id, json_size(attempt.c.provenance).label("size"))
            .join_from(attempt, last, and_(attempt.c.point_id == last.c.point_id,
                                           attempt.c.attempt_no == last.c.attempt_no))
            .cte("latest"))


def _oversized(latest):
    """``point_id, what, rank, size`` of each stored JSON value harvest's SQL would parse that
    is longer than ``JSON_MAX``: the attempt's provenance, its ranks' ``extra``, its
    profiler windows' ``top_ops``."""
    from sqlalchemy import null, union_all

    from campaign.harvest.query import JSON_MAX, json_size

    def rows(table, column: str):
        size = json_size(table.c[column])
        return (select(latest.c.point_id, literal(f"{table.name}.{column}", String()).label("what"),
                       table.c.rank, size.label("size"))
                .join_from(table, latest, table.c.attempt_id == latest.c.id).where(size > JSON_MAX))

    provenance = select(latest.c.point_id, literal("attempt.provenance", String()).label("what"),
                        null().label("rank"), latest.c.size).where(latest.c.size > JSON_MAX)
    return union_all(provenance, rows(rank_timing, "extra"), rows(profile, "top_ops"))


def _mistyped(latest, table):
    """``point_id, what`` per latest attempt with rows in ``table``: ``what`` names a value
    of them that its column's type does not hold (the column and SQLite's name of the
    value's type, ``wall_s text``), else NULL; SQLite's ``typeof``, no value read."""
    if table is iteration:  # a million rows: max() alone per row (SQLite orders text and blobs after numbers)
        worst = func.max(iteration.c.iter_s)
        what = case((func.typeof(worst).in_(("text", "blob")), literal("iter_s ", String()) + func.typeof(worst)),
                    else_=None)
        return (select(latest.c.point_id, what).join_from(iteration, latest, iteration.c.attempt_id == latest.c.id)
                .group_by(latest.c.point_id))
    checks = []
    for column in table.c:
        allowed = next((kinds for sql_type, kinds in _TYPES if isinstance(column.type, sql_type)), None)
        if allowed is None or isinstance(column.type, JSON):
            continue
        kind = func.typeof(column)
        checks.append((kind.not_in(("null",) + allowed), literal(f"{column.name} ", String()) + kind))
    what = func.min(case(*checks, else_=None)).label("what")
    return (select(latest.c.point_id, what).join_from(table, latest, table.c.attempt_id == latest.c.id)
            .group_by(latest.c.point_id))


def _named(campaign_id: str, point_id: int, idx: dict) -> str:
    return f"point #{idx[point_id]} (id {point_id}) of campaign {printable(campaign_id)}"


def _of_rank(rank: Any) -> str:
    return f" (rank {printable(rank)})" if rank is not None else ""


def _expected(column) -> str:
    if isinstance(column.type, (Boolean, Integer)):
        return "an integer"
    return "a number" if isinstance(column.type, Float) else "text"


def _count(size: Any) -> str:
    return f"{size:,}" if isinstance(size, int) and not isinstance(size, bool) else printable(size)
