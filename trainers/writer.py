"""The job's own small writer to the results store: batched inserts, short
transactions, idempotent keys, back-off on a busy database, and a spool file when
the store cannot be reached in time.

Every write is an *operation* (start, rows, finish) keyed by (point_id, attempt_no),
never by a database-generated id, so that it can be replayed later. When the store
stays locked or unreachable past ``busy_timeout_s``, this and every later operation
of the writer go, in order, to ``<spool_dir>/p<point>-a<attempt>-r<rank>.jsonl``;
``campaign ingest`` replays them exactly once (``campaign status`` shows such a point as
``spooled`` until then).
"""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

from sqlalchemy import func, select
from sqlalchemy.exc import DBAPIError, OperationalError

from campaign_door.write import open_append
from campaign_sql.engine import check_version, make_engine
from campaign_sql.migrate import READABLE
from campaign_sql.ops import AttemptKey, apply_op
from campaign_sql.schema import attempt

BATCH_ROWS = 5000
SPOOL_ENV = "CAMPAIGN_SPOOL_DIR"


def _transient(exc: Exception) -> bool:
    text = str(exc).lower()
    return isinstance(exc, OperationalError) or any(s in text for s in ("locked", "busy", "could not connect", "timeout"))


class JobWriter:
    def __init__(self, url: str, *, busy_timeout_s: float = 30.0, spool_dir: Optional[str] = None):
        self.url = url
        self.busy_timeout_s = busy_timeout_s
        self.spool_dir = spool_dir if spool_dir is not None else os.environ.get(SPOOL_ENV)
        self.spool_path: Optional[Path] = None  # set once this writer has spooled
        self.engine = make_engine(url, busy_timeout_s=busy_timeout_s)
        self._ids: dict[AttemptKey, int] = {}
        try:
            check_version(self.engine, READABLE)
        except DBAPIError:
            if not self.spool_dir:
                raise
            # unreachable now: operations will spool; the version is checked at ingest

    def close(self) -> None:
        self.engine.dispose()

    # ------------------------------------------------------------ transport
    def _retry(self, fn: Callable[[Any], Any]) -> Any:
        """Run ``fn(conn)`` in a transaction, backing off while the database is busy."""
        deadline = time.monotonic() + self.busy_timeout_s
        delay = 0.05
        while True:
            try:
                with self.engine.begin() as conn:
                    return fn(conn)
            except DBAPIError as exc:
                if not _transient(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(delay * (1 + random.random()))
                delay = min(delay * 2, 2.0)

    def _do(self, key: AttemptKey, rank: int, op: str, payload: dict) -> Any:
        """Apply an operation now, or append it to the spool (and keep spooling after that)."""
        if self.spool_path is None:
            try:
                return self._retry(lambda conn: apply_op(conn, op, key, payload, self._ids))
            except DBAPIError as exc:
                if not self.spool_dir or not _transient(exc):
                    raise
                self.spool_path = Path(self.spool_dir) / f"p{key.point_id}-a{key.attempt_no}-r{rank}.jsonl"
                self.spool_path.parent.mkdir(parents=True, exist_ok=True)
                print(f"campaign: results store busy/unreachable past {self.busy_timeout_s:g} s ({exc.__class__.__name__}); "
                      f"spooling to {self.spool_path}", flush=True)
        record = {"op": op, "point_id": key.point_id, "attempt_no": key.attempt_no, "payload": payload}
        # through the door: never a link's target nor a FIFO planted in the job folder
        with os.fdopen(open_append(self.spool_path), "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record, default=float) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        return None

    # ------------------------------------------------------------ operations
    def start_attempt(self, point_id: int, *, job_id: str, world_size: int, provenance: Mapping[str, Any],
                      attempt_base: Optional[int] = None, restarts: Optional[int] = None) -> AttemptKey:
        """Record that an attempt of ``point_id`` runs; returns its key.

        ``attempt_base`` (the job's spec) is the attempt its submission opened; the job's
        requeues are the next ones (``attempt_number``). ``restarts``: how often this
        job has been requeued, when known without the store (a checkpoint says so)."""
        no = self.attempt_number(point_id, attempt_base, restarts)
        payload = {"job_id": job_id, "world_size": world_size, "started_at": time.time(), "provenance": dict(provenance)}
        if attempt_base is not None and no > attempt_base:
            payload["origin"] = "requeue"
        key = AttemptKey(point_id, no)
        self._do(key, 0, "start", payload)
        return key

    def attempt_number(self, point_id: int, base: Optional[int], restarts: Optional[int] = None) -> int:
        """This run's attempt number: its submission's ``base`` plus the job's requeues so
        far (SLURM counts them in ``SLURM_RESTART_COUNT``; elsewhere ``restarts`` or, failing
        that, the attempts of this submission the store saw start). A job submitted before
        attempts were numbered per submission (no base) counts as it always did."""
        slurm = os.environ.get("SLURM_RESTART_COUNT")
        if base is None:
            if slurm is not None:
                return int(slurm)
            return self._count(select(func.count()).select_from(attempt).where(attempt.c.point_id == point_id))
        if slurm is not None:
            return base + int(slurm)
        if restarts is not None:
            return base + restarts
        return base + self._count(select(func.count()).select_from(attempt).where(
            attempt.c.point_id == point_id, attempt.c.attempt_no >= base, attempt.c.started_at.is_not(None)))

    def _count(self, query) -> int:
        try:
            return int(self._retry(lambda conn: conn.execute(query).scalar_one()))
        except DBAPIError:  # unreachable: the spool records it; ingest replays it as this number
            return 0

    def write_rank(self, key: AttemptKey, rank: int, summary: Mapping[str, Any], rows: Sequence[Mapping[str, Any]], *,
                   profile_row: Optional[Mapping[str, Any]] = None, breakdown_rows: Iterable[Mapping[str, Any]] = (),
                   evaluation_rows: Iterable[Mapping[str, Any]] = ()) -> None:
        """Write one rank's iteration rows (in batches), summary and optional profile/breakdown
        rows, and the job's evaluation rows (rank 0's, trainers/evaluate.py: the whole split's)."""
        key = AttemptKey(*key)
        for start in range(0, len(rows), BATCH_ROWS):
            self._do(key, rank, "rows", {"table": "iteration", "rank": rank, "rows": [dict(r) for r in rows[start:start + BATCH_ROWS]]})
        tail = {"rank_timing": [dict(summary)], "profile": [dict(profile_row)] if profile_row else [],
                "breakdown": [dict(b) for b in breakdown_rows]}
        evaluations = [dict(e) for e in evaluation_rows]
        if evaluations:  # only then: a run without validation writes what it always wrote
            tail["evaluation"] = evaluations
        self._do(key, rank, "rank", {"rank": rank, "tables": tail})

    def write_profile(self, key: AttemptKey, rank: int, profile_row: Mapping[str, Any]) -> None:
        """Write one rank's ``profile`` row (after its timing rows: the profiler window runs last)."""
        self._do(AttemptKey(*key), rank, "rank", {"rank": rank, "tables": {"profile": [dict(profile_row)]}})

    def finish_attempt(self, key: AttemptKey, point_id: int, state: str, reason: Optional[str] = None, *,
                       rank: int = 0) -> None:
        """Close the attempt and move the point to its final state (``rank``: who says so,
        which names the spool file it goes to if the store is out of reach)."""
        self._do(AttemptKey(*key), rank, "finish", {"state": state, "reason": reason, "ended_at": time.time()})
