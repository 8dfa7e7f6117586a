"""Heartbeats: a running rank's iteration count in the store every few seconds.

``campaign status`` shows each running point's iteration i/n, rate and ETA from these
rows (table ``progress``, campaign_sql.schema). They are written off the timed path: a
daemon thread of the rank wakes every ``store.heartbeat_s`` seconds, reads the
Recorder's iteration counter (a Python int the loop increments anyway: reading it
never touches the device, so no host-device synchronisation) and inserts one row in a
short transaction of its own (a pooled connection of the job writer's engine). The loop
itself does nothing for it. One row is written as the loop starts, one as its timed
window opens (the thread reads the counter every 0.1 s until then), and one as it ends,
so a point's rows also give its start-up, its warm-up and its tail, and its rate is
known one interval into the timed window.

A heartbeat that cannot be written (the store locked past a short wait, out of reach,
the writer spooling, or an attempt that is not in the store) is skipped: progress is a
convenience, never a reason to slow down or fail a run.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Optional

from sqlalchemy import and_, select

from campaign_sql.engine import insert_ignore
from campaign_sql.schema import attempt, progress

DEFAULT_INTERVAL_S = 10.0  # store.heartbeat_s's default (campaign/catalogue/config.py)
STOP_WAIT_S = 5.0  # how long stop() waits for a heartbeat being written
WARMUP_POLL_S = 0.1  # during the warm-up, how often the thread reads the counter (to beat as the window opens)


class Heartbeat:
    """One rank's heartbeat thread (``start``/``stop``); see the module docstring.

    ``counter`` returns the iterations the rank has begun (warm-up included); ``total``
    and ``warmup`` are the loop's iteration counts; ``clock`` gives unix time."""

    def __init__(self, engine: Any, attempt_id: int, rank: int, *, total: int, warmup: int,
                 counter: Callable[[], int], interval_s: float, clock: Callable[[], float] = time.time):
        self.engine = engine
        self.attempt_id = int(attempt_id)
        self.rank = int(rank)
        self.total = int(total)
        self.warmup = int(warmup)
        self.counter = counter
        self.interval_s = float(interval_s)
        self.clock = clock
        self.seq = 0
        self.written = 0  # rows that reached the store
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._lock = threading.Lock()  # one write at a time (the thread's and stop()'s last one)

    def beat(self) -> bool:
        """Write one row now; False (and nothing raised) if it could not be written."""
        with self._lock:
            row = {"attempt_id": self.attempt_id, "rank": self.rank, "seq": self.seq, "at": self.clock(),
                   "iteration": min(max(int(self.counter()), 0), self.total), "total": self.total,
                   "warmup": self.warmup}
            self.seq += 1
            try:
                with self.engine.begin() as conn:
                    insert_ignore(conn, progress, [row])
            except Exception:  # locked, unreachable, a store without the table: skipped
                return False
            self.written += 1
            return True

    def _run(self) -> None:
        self.beat()
        next_at = time.monotonic() + self.interval_s
        timed = self.warmup <= 0  # the timed window has begun (one beat marks its start)
        while True:
            now = time.monotonic()
            wait = next_at - now if timed else min(next_at - now, WARMUP_POLL_S)
            if self._stop.wait(max(wait, 0.0)):
                return
            if not timed and self.counter() > self.warmup:  # the first timed iteration has begun
                timed = True
                self.beat()
            if time.monotonic() >= next_at:
                self.beat()
                next_at = time.monotonic() + self.interval_s

    def start(self) -> "Heartbeat":
        """Start the thread (its first row is written at once)."""
        self._thread = threading.Thread(target=self._run, name=f"campaign-heartbeat-r{self.rank}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread and write the last row (the loop's end). Never raises."""
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join(STOP_WAIT_S)
        if not self._thread.is_alive():  # a thread stuck on a locked store is left to its daemon fate
            self.beat()
        self._thread = None


class NoHeartbeat:
    """What ``start`` returns when there is nothing to beat for (interval 0, no attempt)."""

    written = 0

    def stop(self) -> None:
        pass


def attempt_row_id(engine: Any, key: Any) -> Optional[int]:
    """The store id of the attempt ``key`` (point_id, attempt_no), None if it is not there."""
    try:
        with engine.connect() as conn:
            return conn.execute(select(attempt.c.id).where(
                and_(attempt.c.point_id == int(key[0]), attempt.c.attempt_no == int(key[1])))).scalar()
    except Exception:  # out of reach: no heartbeats
        return None


def start(writer: Any, key: Any, rank: int, *, total: int, warmup: int, counter: Callable[[], int],
          interval_s: Optional[float]) -> Heartbeat | NoHeartbeat:
    """Start rank ``rank``'s heartbeat for the attempt ``key`` through the job's writer
    (trainers.writer.JobWriter): none with ``interval_s`` 0 (or negative), while the
    writer spools, or when the attempt is not in the store."""
    interval = DEFAULT_INTERVAL_S if interval_s is None else float(interval_s)
    if interval <= 0 or key is None or getattr(writer, "spool_path", None) is not None:
        return NoHeartbeat()
    attempt_id = attempt_row_id(writer.engine, key)
    if attempt_id is None:
        return NoHeartbeat()
    return Heartbeat(writer.engine, attempt_id, rank, total=total, warmup=warmup, counter=counter,
                     interval_s=interval).start()
