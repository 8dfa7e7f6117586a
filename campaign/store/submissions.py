"""A point's submissions and attempts in the store (host side).

Every submission of a point (its launch, ``campaign resume``, an automatic retry within
``max_retries``) opens one attempt row before the point is handed to its scheduler:
``open_attempts`` numbers it after the point's attempts so far and the job learns the
number from its spec (``attempt_base``); a requeue of that job is the next number
(trainers/writer.py). Before a point is submitted again, ``claim`` closes its previous
attempt with the state it ended in (what ``campaign.observe.state`` derives: the job may never
have said so itself) and takes the point for the new submission, only if nobody else
did meanwhile: two resumes of one campaign never submit a point twice.
"""

from __future__ import annotations

import time
from typing import Any, Iterable, Mapping, Optional, Sequence

from sqlalchemy import and_, bindparam, case, func, insert, select, update

from campaign.common.signing import sign_job, signing_key
from campaign.store.many import execute_many
from campaign_sql.schema import ACTIVE_STATES, JOB_SIGNED_SINCE, attempt, point

OPEN = ("registered", "waiting")  # an attempt (or point) not handed to its scheduler yet
# Point columns a new submission starts afresh (the previous job's stay on its attempt).
_FRESH = dict(job_id=None, job_folder=None, log_path=None, reason=None, submitted_at=None, started_at=None,
              ended_at=None)


class Submissions:
    """The store's submission and attempt operations (mixed into ``Store``)."""

    version: int

    def open_attempts(self, point_ids: Sequence[int], *, origin: str, overrides: Optional[Sequence[str]] = None,
                      state: str = "registered") -> dict[int, int]:
        """Open one attempt per point for a submission (``state`` ``registered``: about to
        go; ``waiting``: held back for room); returns point id -> its attempt number. A
        point whose last attempt is still open (waiting, never handed over) keeps it."""
        ids = list(point_ids)
        if not ids:
            return {}
        with self._begin() as conn:  # type: ignore[attr-defined]
            last = _last_attempts(conn, ids)
            numbers, new = {}, []
            for pid in ids:
                row = last.get(pid)
                if row is not None and row.state in OPEN and row.job_id is None:
                    numbers[pid] = row.attempt_no
                    conn.execute(update(attempt).where(and_(attempt.c.point_id == pid, attempt.c.attempt_no == row.attempt_no))
                                 .values(state=state))
                    continue
                numbers[pid] = row.attempt_no + 1 if row is not None else 0
                new.append({"point_id": pid, "attempt_no": numbers[pid], "state": state, "origin": origin,
                            "overrides": list(overrides) if overrides else None})
            if new:
                execute_many(conn, insert(attempt), new)
        return numbers

    def mark_submitted(self, updates: Iterable[Mapping[str, Any]], campaign_id: Optional[str] = None) -> None:
        """Record job ids and folders of submitted points (and of their attempts, given
        ``attempt_no``); a point a job already moved on stays as the job left it. Given the
        points' ``campaign_id`` (and each update its ``executor``), each point's job is
        signed with the user's key (``campaign.common.signing.sign_job``): ``campaign cancel``
        signals no job without that signature."""
        now = time.time()
        # Two statements (the point's, its attempt's), each executed for every point at once
        # (executemany): a launch of 10,000 points made 40,000 round trips, then 4 statements.
        # Each touches its own point's rows only; the state guard of each is a CASE over the
        # row as it was (every SET of an UPDATE reads the old row), so a point (attempt) a job
        # already moved on keeps its state and reason, as when the guard was its own statement.
        rows = [{"b_id": u["point_id"], "b_job": u["job_id"], "b_folder": u.get("job_folder"),
                 "b_log": u.get("log_path"), "b_state": u.get("state", "pending"), "b_reason": u.get("reason"),
                 "b_attempt": u.get("attempt_no"), "b_exec": u.get("executor")} for u in updates]
        if not rows:
            return
        key = signing_key(create=True) if campaign_id is not None else None
        for r in rows:  # what was just submitted, as this process knows it (never read back from the store)
            r["b_sig"] = (sign_job(key, campaign_id, r["b_id"], r["b_exec"], r["b_job"], r["b_folder"])
                          if key is not None and r["b_exec"] is not None and r["b_job"] is not None else None)
        signed = {"job_signature": bindparam("b_sig")} if self.version >= JOB_SIGNED_SINCE else {}
        tried = [r for r in rows if r["b_attempt"] is not None]
        fresh = point.c.state == "registered"
        with self._begin() as conn:  # type: ignore[attr-defined]
            execute_many(conn, update(point).where(point.c.id == bindparam("b_id"))
                         .values(job_id=bindparam("b_job"), job_folder=bindparam("b_folder"),
                                 log_path=bindparam("b_log"), submitted_at=now, **signed,
                                 state=case((fresh, bindparam("b_state", type_=point.c.state.type)),
                                            else_=point.c.state),
                                 reason=case((fresh, bindparam("b_reason", type_=point.c.reason.type)),
                                             else_=point.c.reason)), rows)
            if tried:
                execute_many(conn, update(attempt)
                             .where(and_(attempt.c.point_id == bindparam("b_id"),
                                         attempt.c.attempt_no == bindparam("b_attempt")))
                             .values(job_id=bindparam("b_job"), submitted_at=now,
                                     state=case((attempt.c.state == "registered", "pending"), else_=attempt.c.state)),
                             tried)

    def close_open_attempts(self, point_ids: Sequence[int], state: str, reason: Optional[str],
                            ended_at: float) -> None:
        """End as ``state`` the open attempt (``OPEN``: waiting or registered, never handed
        to a scheduler) of each of ``point_ids``: a waiting point cancelled keeps no attempt
        that still says it waits."""
        ids = list(point_ids)
        if not ids:
            return
        with self._begin() as conn:  # type: ignore[attr-defined]
            conn.execute(update(attempt).where(and_(attempt.c.point_id.in_(ids), attempt.c.state.in_(OPEN),
                                                    attempt.c.job_id.is_(None)))
                         .values(state=state, reason=reason, ended_at=ended_at))

    def reject(self, point_id: int, reason: Optional[str], attempt_no: Optional[int] = None) -> None:
        """A point its scheduler refused (or that could not be handed to it): ``rejected``
        with the reason, its attempt too."""
        with self._begin() as conn:  # type: ignore[attr-defined]
            conn.execute(update(point).where(and_(point.c.id == point_id, point.c.state.in_(ACTIVE_STATES)))
                         .values(state="rejected", reason=reason))
            if attempt_no is not None:
                conn.execute(update(attempt).where(and_(attempt.c.point_id == point_id, attempt.c.attempt_no == attempt_no))
                             .values(state="rejected", reason=reason, ended_at=time.time()))

    def hold(self, point_ids: Sequence[int], reason: str, *, origin: str = "launch",
             overrides: Optional[Sequence[str]] = None) -> None:
        """Keep registered points ``waiting`` for room in the scheduler, with why; their
        submission's attempt is opened (``waiting``) and used when they go."""
        if not point_ids:
            return
        self.open_attempts(point_ids, origin=origin, overrides=overrides, state="waiting")
        with self._begin() as conn:  # type: ignore[attr-defined]
            conn.execute(update(point).where(and_(point.c.id.in_(list(point_ids)), point.c.state.in_(OPEN)))
                         .values(state="waiting", reason=reason))

    def update_config(self, point_id: int, config: Mapping[str, Any], signature: Optional[str] = None) -> None:
        """The point's resolved config after ``campaign resume``'s overrides (redacted), and
        its new ``signature`` (campaign.common.signing; None leaves the point unsigned: a config
        changed without one is never resubmitted)."""
        with self._begin() as conn:  # type: ignore[attr-defined]
            conn.execute(update(point).where(point.c.id == point_id).values(config=dict(config), signature=signature))

    def claim(self, p: Mapping[str, Any]) -> bool:
        """Take the point ``p`` (a row of ``campaign.observe.state.effective_points``) for a new
        submission: its previous attempt is closed with ``p``'s effective state and
        reason (one is recorded for a submission that has none, e.g. made before
        schema v2), and the point is ``registered`` again with nothing of the previous
        job. False when the point changed since ``p`` was read (another command took it)."""
        return self.claim_many([p])[0]

    def claim_many(self, points: Sequence[Mapping[str, Any]]) -> list[bool]:
        """``claim`` for each of ``points``, in one transaction (a resume of 10,000 points made
        10,000 of them): each point is still taken alone, only if it has not changed."""
        now = time.time()
        with self._begin() as conn:  # type: ignore[attr-defined]
            return [_claim(conn, p, now) for p in points]

    def attempts(self, campaign_id: str) -> list[dict]:
        """Every attempt of the campaign's points (sweep order, then attempt number) with
        the point's keys; columns an older store lacks read as None."""
        cols = [attempt.c.point_id, attempt.c.attempt_no, attempt.c.job_id, attempt.c.state, attempt.c.reason,
                attempt.c.started_at, attempt.c.ended_at, attempt.c.world_size, attempt.c.provenance]
        if self.version >= 2:
            cols += [attempt.c.origin, attempt.c.overrides, attempt.c.submitted_at, attempt.c.node_list]
        q = (select(point.c.idx, *cols).join_from(attempt, point, point.c.id == attempt.c.point_id)
             .where(point.c.campaign_id == campaign_id).order_by(point.c.idx, attempt.c.attempt_no))
        with self.engine.connect() as conn:  # type: ignore[attr-defined]
            return [dict(r) for r in conn.execute(q).mappings().all()]


def _last_attempts(conn: Any, ids: list[int]) -> dict[int, Any]:
    """Point id -> its last attempt (attempt_no, state, job_id) for those of ``ids`` that
    have one. A launch's points have none: one probe of the ids' range (an index's) says
    so, instead of a query naming each of them (10,000 parameters a launch)."""
    lo, hi = min(ids), max(ids)
    if conn.execute(select(attempt.c.point_id).where(attempt.c.point_id.between(lo, hi)).limit(1)).first() is None:
        return {}
    top = (select(attempt.c.point_id, func.max(attempt.c.attempt_no).label("no"))
           .where(attempt.c.point_id.in_(ids)).group_by(attempt.c.point_id).subquery())
    return {r.point_id: r for r in conn.execute(
        select(attempt.c.point_id, attempt.c.attempt_no, attempt.c.state, attempt.c.job_id)
        .join(top, and_(top.c.point_id == attempt.c.point_id, top.c.no == attempt.c.attempt_no)))}


def _claim(conn: Any, p: Mapping[str, Any], now: float) -> bool:
    """Take point ``p`` inside ``conn``'s transaction (Submissions.claim)."""
    same = and_(point.c.id == p["id"], point.c.state == p["stored_state"],
                point.c.job_id.is_(None) if p.get("job_id") is None else point.c.job_id == p["job_id"])
    moved = conn.execute(update(point).where(same).values(state="registered", **_FRESH)).rowcount
    if not moved:
        return False
    if p["state"] in ("waiting", "registered"):  # never submitted: nothing to close
        return True
    last = conn.execute(select(attempt.c.attempt_no, attempt.c.state, attempt.c.job_id)
                        .where(attempt.c.point_id == p["id"]).order_by(attempt.c.attempt_no.desc()).limit(1)).first()
    closed = {"state": p["state"], "reason": p.get("reason"), "ended_at": p.get("ended_at") or now,
              "node_list": p.get("node_list")}
    if last is not None and (last.job_id == p.get("job_id") or p.get("job_id") is None):
        if last.state in ACTIVE_STATES:
            conn.execute(update(attempt).where(and_(attempt.c.point_id == p["id"], attempt.c.attempt_no == last.attempt_no))
                         .values(**closed))
    else:  # the previous submission has no attempt of its own: record it
        conn.execute(insert(attempt), [dict(closed, point_id=p["id"], attempt_no=(last.attempt_no + 1) if last else 0,
                                            job_id=p.get("job_id"), submitted_at=p.get("submitted_at"),
                                            started_at=p.get("started_at"))])
    return True
