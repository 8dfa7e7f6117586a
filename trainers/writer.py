"""The job's own small writer to the results store: batched inserts, short
transactions, idempotent keys, and back-off on a busy database."""

from __future__ import annotations

import os
import random
import time
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

from sqlalchemy import and_, func, insert, select, update
from sqlalchemy.exc import OperationalError

from campaign_sql.engine import check_version, insert_ignore, make_engine
from campaign_sql.schema import attempt, breakdown, iteration, point, profile, rank_timing

BATCH_ROWS = 5000
RUNNING_FROM = ("registered", "pending", "requeued", "running")


class JobWriter:
    def __init__(self, url: str, *, busy_timeout_s: float = 30.0):
        self.url = url
        self.busy_timeout_s = busy_timeout_s
        self.engine = make_engine(url, busy_timeout_s=busy_timeout_s)
        check_version(self.engine)

    def close(self) -> None:
        self.engine.dispose()

    def _retry(self, fn: Callable[[Any], Any]) -> Any:
        """Run ``fn(conn)`` in a transaction, backing off while the database is busy."""
        deadline = time.monotonic() + self.busy_timeout_s
        delay = 0.05
        while True:
            try:
                with self.engine.begin() as conn:
                    return fn(conn)
            except OperationalError as exc:
                busy = "locked" in str(exc).lower() or "busy" in str(exc).lower()
                if not busy or time.monotonic() > deadline:
                    raise
                time.sleep(delay * (1 + random.random()))
                delay = min(delay * 2, 2.0)

    def start_attempt(self, point_id: int, *, job_id: str, world_size: int, provenance: Mapping[str, Any]) -> int:
        """Record a new attempt of ``point_id`` (running) and return its id."""
        restart = os.environ.get("SLURM_RESTART_COUNT")

        def tx(conn):
            no = int(restart) if restart is not None else conn.execute(
                select(func.count()).select_from(attempt).where(attempt.c.point_id == point_id)
            ).scalar_one()
            existing = conn.execute(
                select(attempt.c.id).where(and_(attempt.c.point_id == point_id, attempt.c.attempt_no == no))
            ).scalar()
            now = time.time()
            if existing is not None:  # the same attempt started again (e.g. a local requeue)
                conn.execute(update(attempt).where(attempt.c.id == existing).values(state="running", started_at=now, reason=None))
                attempt_id = existing
            else:
                attempt_id = conn.execute(
                    insert(attempt).values(
                        point_id=point_id,
                        attempt_no=no,
                        job_id=job_id,
                        state="running",
                        world_size=world_size,
                        started_at=now,
                        provenance=dict(provenance),
                    )
                ).inserted_primary_key[0]
            conn.execute(
                update(point)
                .where(and_(point.c.id == point_id, point.c.state.in_(RUNNING_FROM)))
                .values(state="running", reason=None, started_at=now)
            )
            return attempt_id

        return self._retry(tx)

    def update_provenance(self, attempt_id: int, provenance: Mapping[str, Any]) -> None:
        self._retry(lambda conn: conn.execute(update(attempt).where(attempt.c.id == attempt_id).values(provenance=dict(provenance))))

    def write_rank(
        self,
        attempt_id: int,
        rank: int,
        summary: Mapping[str, Any],
        rows: Sequence[Mapping[str, Any]],
        *,
        profile_row: Optional[Mapping[str, Any]] = None,
        breakdown_rows: Iterable[Mapping[str, Any]] = (),
    ) -> None:
        """Write one rank's summary, iteration rows and optional profile/breakdown rows."""
        key = {"attempt_id": attempt_id, "rank": rank}
        for start in range(0, len(rows), BATCH_ROWS):
            chunk = [dict(r, **key) for r in rows[start : start + BATCH_ROWS]]
            self._retry(lambda conn, chunk=chunk: insert_ignore(conn, iteration, chunk))
        extra_rows = [dict(b, **key) for b in breakdown_rows]

        def tx(conn):
            insert_ignore(conn, rank_timing, [dict(summary, **key)])
            if profile_row is not None:
                insert_ignore(conn, profile, [dict(profile_row, **key)])
            insert_ignore(conn, breakdown, extra_rows)

        self._retry(tx)

    def finish_attempt(self, attempt_id: int, point_id: int, state: str, reason: Optional[str] = None) -> None:
        """Close the attempt and move the point to its final state."""
        now = time.time()

        def tx(conn):
            conn.execute(update(attempt).where(attempt.c.id == attempt_id).values(state=state, reason=reason, ended_at=now))
            conn.execute(
                update(point)
                .where(and_(point.c.id == point_id, point.c.state.in_(RUNNING_FROM)))
                .values(state=state, reason=reason, ended_at=now)
            )

        self._retry(tx)
