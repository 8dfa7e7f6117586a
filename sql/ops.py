"""Store operations of a job, replayable: start an attempt, add rows, finish it.

Operations name their attempt by (point_id, attempt_no), never by a database id, so
that a job's writer (trainers.writer) can spool them to a file when the store is out
of reach and ``campaign ingest`` can apply them later. Each is idempotent: applying
one twice changes nothing.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import and_, exists, or_, select, update

from campaign_sql.engine import insert_ignore
from campaign_sql.schema import attempt, breakdown, evaluation, iteration, point, profile, rank_timing

RUNNING_FROM = ("registered", "pending", "requeued", "running")
_STARTED = ("job_id", "world_size", "started_at", "provenance")  # what a job's start records on its attempt
ROW_TABLES = {"iteration": iteration, "rank_timing": rank_timing, "profile": profile, "breakdown": breakdown,
              "evaluation": evaluation}


class AttemptKey(tuple):
    """(point_id, attempt_no): how every operation names its attempt."""

    def __new__(cls, point_id: int, attempt_no: int):
        return super().__new__(cls, (int(point_id), int(attempt_no)))

    def __getnewargs__(self):  # pickled between ranks
        return (self[0], self[1])

    @property
    def point_id(self) -> int:
        return self[0]

    @property
    def attempt_no(self) -> int:
        return self[1]


def _latest(key: AttemptKey):
    """The point's own state follows only its latest attempt: a late report of an earlier
    one (a rank that ended after its point was resubmitted, a spool file ingested late)
    changes that attempt alone."""
    return ~exists(select(attempt.c.id).where(and_(attempt.c.point_id == key.point_id,
                                                   attempt.c.attempt_no > key.attempt_no)))


def _attempt_id(conn, key: AttemptKey, cache: dict) -> int:
    if key not in cache:
        found = conn.execute(select(attempt.c.id).where(
            and_(attempt.c.point_id == key.point_id, attempt.c.attempt_no == key.attempt_no))).scalar()
        if found is None:  # rows of an attempt whose start was lost: make it
            insert_ignore(conn, attempt, [{"point_id": key.point_id, "attempt_no": key.attempt_no, "state": "running"}])
            found = conn.execute(select(attempt.c.id).where(
                and_(attempt.c.point_id == key.point_id, attempt.c.attempt_no == key.attempt_no))).scalar_one()
        cache[key] = found
    return cache[key]


def apply_op(conn, op: str, key: AttemptKey, payload: dict, cache: dict) -> Any:
    """Apply one operation in ``conn``'s transaction. Idempotent: replaying changes nothing."""
    if op == "start":
        row = {"point_id": key.point_id, "attempt_no": key.attempt_no, "state": "running", **payload}
        known = conn.execute(select(attempt.c.id).where(
            and_(attempt.c.point_id == key.point_id, attempt.c.attempt_no == key.attempt_no))).scalar()
        if known is None:
            insert_ignore(conn, attempt, [row])
        elif payload.get("started_at"):
            # opened at submission (sql/schema.py), or the same attempt started again; one
            # that has ended stays ended (a start replayed from a spool file)
            conn.execute(update(attempt).where(and_(attempt.c.id == known, attempt.c.state.in_(RUNNING_FROM)))
                         .values(state="running", reason=None, **{k: v for k, v in payload.items() if k in _STARTED}))
        if payload.get("job_id") and payload.get("started_at"):
            # earlier runs of this very job that never said how they ended: the scheduler
            # requeued it (a node failure, SLURM's own requeue), they ended then
            conn.execute(update(attempt).where(and_(
                attempt.c.point_id == key.point_id, attempt.c.attempt_no < key.attempt_no,
                attempt.c.job_id == payload["job_id"], attempt.c.state.in_(("registered", "pending", "running"))))
                .values(state="requeued", reason=f"requeued: attempt {key.attempt_no} of the same job started",
                        ended_at=payload["started_at"]))
        conn.execute(update(point).where(and_(point.c.id == key.point_id, point.c.state.in_(RUNNING_FROM), _latest(key)))
                     .values(state="running", reason=None, started_at=payload.get("started_at")))
        return key
    aid = _attempt_id(conn, key, cache)
    if op == "rows":
        insert_ignore(conn, ROW_TABLES[payload["table"]], [dict(r, attempt_id=aid, rank=payload["rank"]) for r in payload["rows"]])
    elif op == "rank":
        for name, rows in payload["tables"].items():
            table = ROW_TABLES[name]
            ranked = "rank" in table.c  # evaluation rows are the whole job's, not a rank's
            insert_ignore(conn, table, [dict(r, attempt_id=aid, **({"rank": payload["rank"]} if ranked else {}))
                                        for r in rows])
    elif op == "finish":
        # Any rank of a job may report its failure: the earliest is the cause, whatever
        # order the reports arrive in (spool files are ingested by name); a later one (a
        # peer that lost its partner) does not replace it.
        acond, pcond = attempt.c.id == aid, point.c.state.in_(RUNNING_FROM)
        if payload["state"] == "failed":
            acond = and_(acond, or_(attempt.c.state != "failed", attempt.c.ended_at > payload["ended_at"]))
            pcond = or_(pcond, and_(point.c.state == "failed", point.c.ended_at > payload["ended_at"]))
        conn.execute(update(attempt).where(acond)
                     .values(state=payload["state"], reason=payload["reason"], ended_at=payload["ended_at"]))
        conn.execute(update(point).where(and_(point.c.id == key.point_id, pcond, _latest(key)))
                     .values(state=payload["state"], reason=payload["reason"], ended_at=payload["ended_at"]))
    else:
        raise ValueError(f"unknown spool operation {op!r}")
    return None
