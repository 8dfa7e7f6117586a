"""One state per point, the same everywhere.

A point's *effective* state is what ``campaign status`` (table and ``--json``),
``campaign harvest`` (which points count as completed) and ``campaign cancel`` act on.
It is derived, in memory and read-only, from

- the store: what the job's ranks reported (a final state there is kept: the job
  said so itself, and ``campaign cancel`` records its cancellations);
- the executor, for points the store still has unfinished: the scheduler (one bulk
  ``sacct``), or the local job's processes and log files;
- the spool folder: results a job could not write to the store wait there until
  ``campaign ingest``.

Read commands never write what they observe; the jobs, ``campaign cancel`` and
``campaign ingest`` do. So every reader derives the same states from the same inputs.
"""

from __future__ import annotations

import re
import time
from typing import Optional, Sequence

from campaign.backends import EXECUTORS, get_backend
from campaign.backends.base import Observed
from campaign.common.bounded import is_unreadable
from campaign.store.typed import typed_points
from campaign.common.errors import SchedulerError
from campaign.common.ids import shown
from campaign.common.jobfolder import SPOOL_GLOB, spool_dir, spool_key
from campaign_sql.schema import ACTIVE_STATES

SPOOLED = "spooled"  # finished, its results in spool files: campaign ingest folds them in
FAILED_STATES = ("failed", "cancelled", "timeout", "out_of_memory", "node_fail", "preempted", "boot_fail",
                 "deadline", "rejected", "lost")
NEVER_SUBMITTED_S = 600.0  # a point still unsubmitted this long after its campaign was registered: lost
LOCAL_SIGNAL_DELAY_S = 30  # submitit's local controller warns (USR2) this long before the time limit
# submitit's answer to that warning in rank 0 of a job that cannot checkpoint
_TIMED_OUT = re.compile(r"UncompletedJobError: Job not requeued because: timed-out")


def is_final(state: str) -> bool:
    """Whether a point in ``state`` will change no more by itself (``--wait`` stops)."""
    return state not in ACTIVE_STATES


def spool_waiting(campaign: dict, point_ids: Sequence[int] = ()) -> dict[int, int]:
    """point id -> number of its spool files not yet ingested (``p<point>-a<attempt>-r<rank>.jsonl``)."""
    folder = spool_dir(campaign)  # a stored campaign id that is not one campaign writes: StoreError
    out: dict[int, int] = {}
    if folder is None or not folder.is_dir():
        return out
    for path in folder.glob(SPOOL_GLOB):
        key = spool_key(path.name)
        if key:
            out[key[0]] = out.get(key[0], 0) + 1
    return out


def _time_limit_min(p: dict) -> Optional[float]:
    config = p.get("config")
    try:
        return float(config["platform"]["time_limit_min"])
    except (TypeError, KeyError, ValueError):
        return None


def _local_timeout(p: dict) -> bool:
    """A job that failed because its time limit came, where its executor does not say so
    itself (a local job): submitit's warning made rank 0 raise (reason), or it ran to the
    limit, less the lead its executor stops it with (``Backend.silent_stop_lead_s``), and
    was interrupted."""
    from campaign.backends import backend_of

    if _TIMED_OUT.search(p.get("reason") or ""):
        return True
    backend = backend_of(p.get("executor"))
    lead = backend.silent_stop_lead_s if backend is not None else None
    limit = _time_limit_min(p)
    start, end = p.get("started_at"), p.get("ended_at")
    return (lead is not None and limit is not None and start is not None and end is not None
            and end - start >= limit * 60 - lead - 5)


def derive(p: dict, obs: Optional[Observed], spooled: int = 0, *, now: float,
           registered_at: Optional[float] = None) -> dict:
    """The point ``p`` (a row of ``Store.points``) with its effective ``state``, ``reason``,
    ``started_at`` and ``ended_at``; ``stored_state`` keeps what the store says. Pure."""
    out = dict(p, stored_state=p["state"])
    state = p["state"]
    if state in ACTIVE_STATES and spooled:
        out.update(state=SPOOLED, reason=f"its results wait in {spooled} spool file(s) (the store was out of the "
                                         "job's reach): run campaign ingest")
    elif state in ACTIVE_STATES and obs is not None:
        keep_running = state == "running" and obs.state in ("pending", "running")  # the job itself said it runs
        if not keep_running:
            out.update(state=obs.state, reason=obs.reason)
        out["started_at"] = p.get("started_at") or obs.started_at
        out["node_list"] = obs.node_list
        if not is_final(out["state"]):
            out["ended_at"] = None
        else:
            out["ended_at"] = obs.ended_at or p.get("ended_at")
    elif state == "registered" and not p.get("job_id") and registered_at is not None \
            and now - registered_at > NEVER_SUBMITTED_S:
        out.update(state="lost", reason="never handed to a scheduler: the launch that registered it did not finish")
    elif state == "failed" and _local_timeout(p):
        limit = _time_limit_min(p)
        shown = f"platform.time_limit_min={limit:g}" if limit is not None else "its time limit"
        out.update(state="timeout", reason=f"time limit reached ({shown}; a local job is stopped "
                                           f"{LOCAL_SIGNAL_DELAY_S} s before it)")
    return out


def observe(points: Sequence[dict]) -> tuple[dict[int, Observed], list[str]]:
    """The executors' view of ``points`` (one bulk query per executor) and warnings for
    the executors that could not be asked (their points keep the store's view)."""
    by_exec: dict[str, list[dict]] = {}
    for p in points:
        by_exec.setdefault(p["executor"], []).append(p)
    seen: dict[int, Observed] = {}
    warnings: list[str] = []
    for executor, pts in by_exec.items():
        try:
            backend = get_backend(executor)
        except ValueError:  # a stored executor no backend has: asked of nobody
            seen.update({p["id"]: Observed("lost", f"the store's executor {shown(executor)} is none of campaign's "
                                                   f"({', '.join(EXECUTORS)}); not asked") for p in pts})
            continue
        try:
            seen.update(backend.observe(pts))
        except SchedulerError as exc:
            warnings.append(f"{executor}: {exc} (showing the store's last known states)")
    return seen, warnings


def effective_points(store, campaign: dict, *, now: Optional[float] = None) -> tuple[list[dict], list[str]]:
    """Every point of ``campaign`` in sweep order with its effective state (``derive``),
    and warnings. Reads the store, asks the executors about the points the store has
    unfinished, looks at the spool folder; writes nothing."""
    now = time.time() if now is None else now
    points, refused = typed_points(campaign["id"], store.points(campaign["id"]))  # typed at the door
    spooled = spool_waiting(campaign)
    active = [p for p in points if p["state"] in ACTIVE_STATES and p.get("job_id") and not spooled.get(p["id"])]
    seen, warnings = observe(active) if active else ({}, [])
    return [derive(p, seen.get(p["id"]), spooled.get(p["id"], 0), now=now, registered_at=campaign.get("created_at"))
            for p in points], refused + unreadable_warnings(campaign, points) + warnings


STORED_JSON = ("config", "overrides")  # a point's JSON that says what the point is


def unreadable_warnings(campaign: dict, points: Sequence[dict]) -> list[str]:
    """One line per campaign or point whose stored JSON is beyond campaign.common.bounded's
    bounds (the store's engine hands it over as ``Unreadable``: empty). Status shows
    such a point without that value (exit 0); harvest leaves the point out
    (``completed_ids``): its figures belong to no configuration it can name."""
    out = []
    if is_unreadable(campaign.get("overrides")):
        out.append(f"campaign {campaign['id']}: its stored overrides are unreadable "
                   f"({campaign['overrides'].reason}); shown without them")
    for p in points:
        bad = [k for k in STORED_JSON if is_unreadable(p.get(k))]
        if bad:
            verb = "are" if len(bad) > 1 else "is"
            out.append(f"point #{p['idx']} (id {p['id']}): its stored {' and '.join(bad)} {verb} unreadable "
                       f"({p[bad[0]].reason}); shown without it, not harvested")
    return out


def completed_ids(points: Sequence[dict]) -> list[int]:
    """The ids of the points whose effective state is completed and whose stored JSON
    can be read (``unreadable_warnings``): those harvest reads."""
    return [p["id"] for p in points
            if p["state"] == "completed" and not any(is_unreadable(p.get(k)) for k in STORED_JSON)]
