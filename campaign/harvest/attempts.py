"""``campaign harvest --table attempts``: every attempt of every point, never merged.

One row per attempt (a submission of the point, or a requeue of its job): where it came
from (launch, resume, an automatic retry, the job's own requeue), its job, its
state and reason, when it ran and for how long, on which node(s), the overrides it ran
with. The harvest's figures come from each point's latest completed attempt alone; a
run that checkpointed and requeued itself carries all its timed iterations in that
attempt, and this table shows which iterations each attempt ran and the gap before it
(time between attempts, never counted as training time). A point with no attempt yet
(never submitted) has one row with its state. The latest attempt of a point still
active in the store shows the point's effective state (campaign.observe.state), as status does.
"""

from __future__ import annotations

import time
from typing import Any, Optional, Sequence

import polars as pl

COLUMNS = {
    "idx": pl.Int64, "platform": pl.Utf8, "gpus": pl.Int64, "trainer": pl.Utf8, "experiment": pl.Utf8,
    "repeat": pl.Int64, "attempt": pl.Int64, "origin": pl.Utf8, "job_id": pl.Utf8, "state": pl.Utf8,
    "reason": pl.Utf8, "started": pl.Utf8, "ended": pl.Utf8, "elapsed_s": pl.Float64, "node": pl.Utf8,
    "iterations": pl.Utf8, "gap_before_s": pl.Float64, "overrides": pl.Utf8,
}
_ACTIVE = ("registered", "waiting", "pending", "running", "requeued")


def _when(t: Optional[float]) -> Optional[str]:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) if t else None


def _node(a: dict) -> Optional[str]:
    prov = a.get("provenance") or {}
    return a.get("node_list") or prov.get("slurm_nodelist") or prov.get("host")


def segments_by_attempt(segments: Sequence[dict]) -> dict[int, dict]:
    """attempt number -> its segment of a checkpointed run (iterations, gap before it)."""
    return {int(s["attempt"]): s for s in segments if s.get("attempt") is not None}


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63


def _seconds(value: Any) -> bool:
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < 1e12)


def checked_segments(extra: Any) -> Optional[list[dict]]:
    """The checkpoint segments of a rank's stored ``extra`` (trainers/checkpoint.py's
    ``summary``: a list of objects, each with ``attempt``, ``first_iter`` <= ``end_iter``
    and ``gap_before_s`` seconds or none); None where there are none, a Refused
    naming what is not so shaped (a store others write)."""
    from campaign.store.typed import Refused

    checkpoint = extra.get("checkpoint") if isinstance(extra, dict) else None
    if checkpoint is None:
        return None
    segments = checkpoint.get("segments") if isinstance(checkpoint, dict) else checkpoint
    if segments is None:
        return None
    if not isinstance(segments, list) or not all(
            isinstance(s, dict) and (s.get("attempt") is None or _count(s.get("attempt"))) and _count(s.get("first_iter"))
            and _count(s.get("end_iter")) and s["first_iter"] <= s["end_iter"] and _seconds(s.get("gap_before_s"))
            for s in segments):
        raise Refused("its rank_timing.extra's checkpoint segments are not as a job writes them")
    return segments or None


def attempts_table(points: Sequence[dict], attempts: Sequence[dict], segments: dict[int, list[dict]]) -> pl.DataFrame:
    """The table (module docstring). ``points``: the campaign's effective points;
    ``attempts``: ``Store.attempts``; ``segments``: point id -> the segments of its
    harvested (latest completed) attempt, from a checkpointed run."""
    by_point: dict[int, list[dict]] = {}
    for a in attempts:
        by_point.setdefault(a["point_id"], []).append(a)
    rows: list[dict[str, Any]] = []
    for p in points:
        keys = {k: p.get(k) for k in ("idx", "platform", "gpus", "trainer", "experiment", "repeat")}
        mine = by_point.get(p["id"], [])
        if not mine:
            rows.append(dict(keys, state=p["state"], reason=p.get("reason"), job_id=p.get("job_id")))
            continue
        seg = segments_by_attempt(segments.get(p["id"], []))
        for n, a in enumerate(mine):
            state, reason = a["state"], a.get("reason")
            started, ended, node = a.get("started_at"), a.get("ended_at"), _node(a)
            if n == len(mine) - 1 and state in _ACTIVE:  # the submission that runs now: as status derives it
                state, reason = p["state"], p.get("reason")
                started, ended = started or p.get("started_at"), ended or p.get("ended_at")
                node = node or p.get("node_list")
                if state in _ACTIVE:
                    ended = None
            s = seg.get(a["attempt_no"])
            end = ended if ended else (time.time() if started and state in ("running",) else None)
            rows.append(dict(
                keys, attempt=a["attempt_no"], origin=a.get("origin"), job_id=a.get("job_id"), state=state,
                reason=reason, started=_when(started), ended=_when(ended),
                elapsed_s=max(0.0, end - started) if started and end else None, node=node,
                iterations=f"{s['first_iter']}-{s['end_iter'] - 1}" if s else None,
                gap_before_s=s.get("gap_before_s") if s else None,
                overrides=" ".join(a.get("overrides") or []) or None))
    return pl.DataFrame([{c: r.get(c) for c in COLUMNS} for r in rows], schema=COLUMNS)


def harvested_segments(store: Any, campaign_id: str, points: Sequence[dict] = ()) -> tuple[dict[int, list[dict]], list[str]]:
    """point id -> the checkpoint segments its latest completed attempt recorded (rank 0's
    ``rank_timing.extra["checkpoint"]["segments"]``; points that never resumed: none), and
    a warning line for each point whose segments are stored otherwise than a job writes
    them (``points``: the campaign's, which name it). An ``extra`` too long to read
    (campaign.harvest.door) reads as none."""
    from campaign.common.text import printable
    from campaign.store.typed import Refused

    from sqlalchemy import and_, func, select

    from campaign.harvest.query import within_bound
    from campaign_sql.schema import attempt, point, rank_timing

    last = (select(attempt.c.point_id, func.max(attempt.c.attempt_no).label("no"))
            .join_from(attempt, point, point.c.id == attempt.c.point_id)
            .where(point.c.campaign_id == campaign_id, attempt.c.state == "completed")
            .group_by(attempt.c.point_id).subquery())
    q = (select(attempt.c.point_id, within_bound(rank_timing.c.extra).label("extra"))
         .join_from(attempt, last, and_(last.c.point_id == attempt.c.point_id, last.c.no == attempt.c.attempt_no))
         .join(rank_timing, and_(rank_timing.c.attempt_id == attempt.c.id, rank_timing.c.rank == 0)))
    out, warnings = {}, []
    idx = {p["id"]: p.get("idx") for p in points}
    with store.engine.connect() as conn:
        for pid, extra in conn.execute(q):
            try:
                segments = checked_segments(extra)
            except Refused as exc:
                warnings.append(f"point #{idx.get(pid)} (id {pid}) of campaign {printable(campaign_id)}: {exc}; "
                                "its attempts shown without them")
                continue
            if segments:
                out[pid] = list(segments)
    return out, warnings


def harvest_attempts(store: Any, campaign: dict) -> tuple[pl.DataFrame, list[str]]:
    """The campaign's attempts table and the warnings of deriving its points' states."""
    from campaign.observe.state import effective_points

    from campaign.store.typed import typed_attempts

    points, warnings = effective_points(store, campaign)
    attempts, refused = typed_attempts(campaign["id"], store.attempts(campaign["id"]))
    segments, unshown = harvested_segments(store, campaign["id"], points)
    return attempts_table(points, attempts, segments), warnings + refused + unshown
