"""How far a campaign's points are, how fast they go, and when the campaign will end.

Running ranks write heartbeats (``progress`` rows, trainers/heartbeat.py): at the start
of their loop, every ``store.heartbeat_s`` seconds, at its end. From them, per point:

- iteration i of n: the slowest rank's count at its last heartbeat;
- rate (iterations/s): the slowest rank's, over its timed iterations (from its first
  heartbeat past the warm-up to its last, once 20 iterations lie between them);
- ETA: when the last rank's loop ends at that rate, then the point's tail (profiled
  iterations at that rate, and the time from a loop's end to the job's end that the
  campaign's finished points took).

A point that has not started is expected to take: start-up (what the campaign's started
points took from the moment they could start, i.e. submission or, for points that take
turns on one machine, the previous point's end, to their first heartbeat), its
iterations at its rate, and the tail. Its rate is measured where the campaign has run
the same work (campaign.observe.estimate.work_key), else the launch's estimate (the store's
previous campaigns, or the trainer's declaration; ``campaign.observe.estimate``).

The campaign ends when its last point does: points that take turns on one machine
(a local, exclusive platform) one after another, the others all at once, where a
scheduler's queue wait is not included (the ETA then says so).

Reads the store only; ``annotate`` and ``campaign_eta`` are pure.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional, Sequence

from campaign.backends import backend_of
from campaign.observe.estimate import STARTUP_S, loop_iterations, point_cost, serial, work_key

NOT_STARTED = ("registered", "waiting", "pending", "requeued")  # states of a point whose loop has not begun
RATE_MIN_ITERATIONS = 20  # a rate from fewer iterations could be off by 1/n (whole iterations per beat)
RATE_MIN_SPAN_S = 300.0  # ... unless iterations are slow: then from two, five minutes apart
STALE_BEATS = 3  # a running point whose last heartbeat is older than this many intervals (and 60 s): stalled?
STALE_MIN_S = 60.0


@dataclass(frozen=True)
class Beat:
    at: float
    iteration: int
    total: int
    warmup: int


@dataclass(frozen=True)
class RankBeats:
    """One rank's first heartbeat, its first past the warm-up (if any) and its last."""

    first: Beat
    timed: Optional[Beat]
    last: Beat

    def rate(self) -> Optional[float]:
        """Iterations per second over the timed iterations (warm-up ones are slower:
        compilation, FLOP counting, caches; without a warm-up, over every iteration), once
        enough of them lie between two beats for the count's step (a beat sees whole
        iterations) to matter little: ``RATE_MIN_ITERATIONS``, or two over
        ``RATE_MIN_SPAN_S`` for slow iterations; None before that."""
        ref = self.timed if self.last.warmup else self.first
        if ref is None or self.last.at <= ref.at:
            return None
        done, span = self.last.iteration - ref.iteration, self.last.at - ref.at
        if done >= RATE_MIN_ITERATIONS or (done >= 2 and span >= RATE_MIN_SPAN_S):
            return done / span
        return None


def _beat(at: Any, iteration: Any, total: Any, warmup: Any) -> Beat:
    """A heartbeat row typed at the door (a store others write): a ``Refused`` naming the
    first value that is not a unix time or a count (campaign.store.typed)."""
    from campaign.store.typed import Refused, integer, shown_value, unix_time

    count = integer(0, "not an integer, 0 or more")
    values = {"at": at, "iteration": iteration, "total": total, "warmup": warmup}
    for column, check in (("at", unix_time), ("iteration", count), ("total", count), ("warmup", count)):
        try:
            values[column] = check(values[column])
        except Refused as exc:
            raise Refused(f"{column}={shown_value(values[column])} is {exc}") from None
    if values["at"] is None:
        raise Refused("at=None is not a unix time")
    return Beat(**values)


def read_beats(store: Any, attempt_ids: Iterable[int]) -> tuple[dict[int, list[RankBeats]], dict[int, str]]:
    """(attempt id -> its ranks' heartbeats (three rows per rank, read by key), attempt id
    -> why its heartbeats are not read: a row of them not of its columns' types); both {}
    for a store from before heartbeats (schema version 1)."""
    from campaign.store.typed import Refused
    from campaign_sql.schema import PROGRESS_SINCE

    ids = sorted({int(a) for a in attempt_ids if a is not None})
    if not ids or not store.has(PROGRESS_SINCE):
        return {}, {}
    from sqlalchemy import and_, func, select

    from campaign_sql.schema import progress as pr

    refused: dict[int, str] = {}

    def rows(pick) -> dict[tuple[int, int], Beat]:
        sub = pick.subquery()
        q = select(pr.c.attempt_id, pr.c.rank, pr.c.at, pr.c.iteration, pr.c.total, pr.c.warmup).join(
            sub, and_(pr.c.attempt_id == sub.c.attempt_id, pr.c.rank == sub.c.rank, pr.c.seq == sub.c.seq))
        out = {}
        for a, r, *values in conn.execute(q):
            try:
                out[(a, r)] = _beat(*values)
            except Refused as exc:
                refused.setdefault(a, str(exc))
        return out

    key = (pr.c.attempt_id, pr.c.rank)
    with store.engine.connect() as conn:
        first = rows(select(*key, func.min(pr.c.seq).label("seq")).where(pr.c.attempt_id.in_(ids)).group_by(*key))
        last = rows(select(*key, func.max(pr.c.seq).label("seq")).where(pr.c.attempt_id.in_(ids)).group_by(*key))
        timed = rows(select(*key, func.min(pr.c.seq).label("seq"))
                     .where(and_(pr.c.attempt_id.in_(ids), pr.c.iteration >= pr.c.warmup)).group_by(*key))
    out: dict[int, list[RankBeats]] = {}
    for (aid, rank), beat in sorted(first.items(), key=lambda item: [(str(type(k)), k) for k in item[0]]):
        if aid not in refused and (aid, rank) in last:
            out.setdefault(aid, []).append(RankBeats(beat, timed.get((aid, rank)), last[(aid, rank)]))
    return out, refused


@dataclass
class Loop:
    """A started point's loop as its heartbeats tell it."""

    iteration: int  # the slowest rank's
    total: int
    rate: Optional[float]  # iterations/s, the slowest rank's
    first_at: float  # the loop's start (first heartbeat)
    last_at: float  # the latest heartbeat of any rank
    ends_at: Optional[float]  # when the last rank's loop is expected to end (ended: when it did)

    @property
    def done(self) -> bool:
        return self.iteration >= self.total


def loop_of(ranks: Sequence[RankBeats], s_per_it: Optional[float] = None) -> Optional[Loop]:
    """The point's loop from its ranks' heartbeats (``s_per_it``: the rate to assume
    for a rank that has no measured one yet)."""
    if not ranks:
        return None
    ends = []
    for r in ranks:
        rate = r.rate()
        if r.last.iteration >= r.last.total:
            ends.append(r.last.at)
        elif rate:
            ends.append(r.last.at + (r.last.total - r.last.iteration) / rate)
        elif s_per_it:
            ends.append(r.last.at + (r.last.total - r.last.iteration) * s_per_it)
        else:
            ends.append(None)
    rates = [x for x in (r.rate() for r in ranks) if x]
    return Loop(iteration=min(r.last.iteration for r in ranks), total=max(r.last.total for r in ranks),
                rate=min(rates) if rates else None, first_at=min(r.first.at for r in ranks),
                last_at=max(r.last.at for r in ranks), ends_at=None if None in ends else max(ends))


# ------------------------------------------------------------------ per point, per campaign


@dataclass
class Overheads:
    """What the campaign's started points took besides their loops (medians; None: not seen yet)."""

    start_s: Optional[float] = None  # from "could start" to the first heartbeat
    tail_s: Optional[float] = None  # from the loop's end to the job's end


def overheads(points: Sequence[dict], loops: Mapping[int, Loop]) -> Overheads:
    """Start-up and tail of the campaign's points that have heartbeats (module docstring)."""
    starts, tails = [], []
    ends = sorted(p["ended_at"] for p in points if p.get("ended_at"))
    for p in points:
        loop = loops.get(p["id"])
        if loop is None:
            continue
        gate = p.get("submitted_at") or p.get("started_at")
        if serial(p.get("config") or {}):  # its turn came when the point before it ended
            before = [e for e in ends if e <= loop.first_at]
            gate = max([g for g in (gate, before[-1] if before else None) if g is not None], default=None)
        else:
            gate = p.get("started_at") or gate
        if gate is not None and loop.first_at >= gate:
            starts.append(loop.first_at - gate)
        profiled = int(((p.get("config") or {}).get("experiment") or {}).get("profile_iterations") or 0)
        if p["state"] == "completed" and p.get("ended_at") and loop.done and not profiled:
            tails.append(max(0.0, p["ended_at"] - loop.last_at))
    return Overheads(statistics.median(starts) if starts else None, statistics.median(tails) if tails else None)


@dataclass
class PointETA:
    """What status shows of a point's progress."""

    iteration: Optional[int] = None
    total: Optional[int] = None
    rate: Optional[float] = None  # iterations/s
    remaining_s: Optional[float] = None  # running: until it ends; not started: how long it will take once it starts
    source: Optional[str] = None  # where a not-started point's rate comes from
    stalled_s: Optional[float] = None  # running, but no heartbeat for this long


def _profiled(p: dict) -> int:
    return int(((p.get("config") or {}).get("experiment") or {}).get("profile_iterations") or 0)


def annotate(points: Sequence[dict], beats: Mapping[int, list[RankBeats]], *, now: float,
             measured: Optional[Mapping[str, Any]] = None) -> tuple[dict[int, PointETA], Overheads]:
    """Per point id its ``PointETA`` (pure: ``points`` as campaign.observe.state derives them,
    ``beats`` by attempt id, ``measured``: campaign.observe.measured.measured_rates)."""
    loops = {p["id"]: loop for p in points if (loop := loop_of(beats.get(p.get("attempt_id"), [])))}
    over = overheads(points, loops)
    tail = over.tail_s or 0.0
    # seconds per iteration this campaign measured, per work
    here: dict[str, list[float]] = {}
    for p in points:
        loop = loops.get(p["id"])
        if loop is not None and loop.rate:
            here.setdefault(_key(p), []).append(1.0 / loop.rate)
    out: dict[int, PointETA] = {}
    for p in points:
        loop, state = loops.get(p["id"]), p["state"]
        config = p.get("config") or {}
        if state == "running" and loop is not None:
            s_per_it = 1.0 / loop.rate if loop.rate else _rate(p, here, measured)[0]
            if loop.ends_at is None and s_per_it:  # no rate of its own yet: the estimated one
                loop = loop_of(beats.get(p.get("attempt_id"), []), s_per_it) or loop
            eta = PointETA(loop.iteration, loop.total, loop.rate)
            if loop.ends_at is not None:
                left = max(0.0, loop.ends_at - now) + _profiled(p) * (s_per_it or 0.0) + tail
                eta.remaining_s = left
            interval = float(((config.get("store") or {}).get("heartbeat_s")) or 10.0)
            quiet = now - loop.last_at
            if not loop.done and quiet > max(STALE_BEATS * interval, STALE_MIN_S):
                eta.stalled_s, eta.remaining_s = quiet, None
            out[p["id"]] = eta
        elif state in NOT_STARTED or (state == "running" and loop is None):
            s_per_it, source = _rate(p, here, measured)
            total = loop_iterations(config, int(p.get("iterations") or 0))
            eta = PointETA(total=total, source=source)
            if s_per_it is not None:
                start = over.start_s if over.start_s is not None else STARTUP_S
                if state == "running":  # started, no heartbeat yet: part of its start-up is behind it
                    start = max(0.0, start - (now - (p.get("started_at") or now)))
                eta.remaining_s = start + total * s_per_it + tail
            out[p["id"]] = eta
        elif loop is not None:  # ended: what its loop did
            out[p["id"]] = PointETA(loop.iteration, loop.total, loop.rate)
    return out, over


def _key(p: dict) -> str:
    return work_key(p.get("config") or {}, p["gpus"], p.get("nodes") or 1, p.get("batch_per_gpu") or 0)


def _rate(p: dict, here: Mapping[str, list[float]], measured: Optional[Mapping[str, Any]]) -> tuple[Optional[float], str]:
    """Seconds per iteration of a point without its own: this campaign's points of the
    same work, else the launch's estimate."""
    mine = here.get(_key(p))
    if mine:
        return statistics.median(mine), "measured in this campaign"
    cost = point_cost(p.get("config") or {}, gpus=p["gpus"], nodes=p.get("nodes") or 1,
                      batch_per_gpu=p.get("batch_per_gpu") or 0, iterations=int(p.get("iterations") or 0),
                      measured=measured)
    return cost.s_per_it, cost.source


@dataclass
class CampaignETA:
    done: int = 0  # final points
    running: int = 0
    pending: int = 0
    fraction: float = 0.0  # of the campaign's points, running ones by their iterations
    ends_at: Optional[float] = None  # None: unknown (or every point is final)
    unknown: int = 0  # unfinished points without an estimate
    queue: bool = False  # some point waits for a scheduler: the queue's wait is not included
    points: dict[int, PointETA] = field(default_factory=dict)


def campaign_eta(points: Sequence[dict], etas: Mapping[int, PointETA], *, now: float,
                 is_final: Any) -> CampaignETA:
    """When the campaign ends (module docstring), from each point's ``PointETA``. Pure."""
    out = CampaignETA(points=dict(etas))
    serial_left = 0.0
    parallel_left = 0.0
    fraction = 0.0
    for p in points:
        eta = etas.get(p["id"]) or PointETA()
        if is_final(p["state"]):
            out.done += 1
            fraction += 1.0
            continue
        if p["state"] == "running":
            out.running += 1
            if eta.iteration is not None and eta.total:
                fraction += min(eta.iteration / eta.total, 1.0)
        else:
            out.pending += 1
            backend = backend_of(p.get("executor"))
            if backend is None or backend.queue_wait:  # an executor none knows: its wait is not known either
                out.queue = True
        if eta.remaining_s is None:
            out.unknown += 1
            continue
        if serial(p.get("config") or {}):
            serial_left += eta.remaining_s
        else:
            parallel_left = max(parallel_left, eta.remaining_s)
    out.fraction = fraction / len(points) if points else 1.0
    if out.running + out.pending and not out.unknown:
        out.ends_at = now + max(serial_left, parallel_left)
    return out


def json_safe(eta: CampaignETA) -> dict:
    """The campaign's ETA as ``status --json`` gives it."""
    return json.loads(json.dumps({k: v for k, v in eta.__dict__.items() if k != "points"}))
