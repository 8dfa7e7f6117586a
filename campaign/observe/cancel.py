"""``campaign cancel``: stop a campaign's unfinished points through their executors."""

from __future__ import annotations

import os
import sys
import time
from typing import Optional, Sequence

from campaign.backends import get_backend
from campaign.common.errors import NotFoundError, StoreError
from campaign.common.jobfolder import job_folder
from campaign.common.signing import signing_key, verify_job
from campaign.observe.state import effective_points, is_final
from campaign.store import open_store
from campaign.store.resolve import campaign_for_write
from campaign.common.text import printable
from campaign_sql.schema import ACTIVE_STATES


def cancel(ref: Optional[str], *, store_url: str, points: Optional[Sequence[int]] = None) -> int:
    """Cancel the unfinished points of a campaign (``points``: only these numbers).

    Every process of a point the store has unfinished is stopped; the points whose
    effective state is unfinished (campaign.observe.state) are recorded ``cancelled``. A point
    that already ended (its job died, a time limit) keeps that state: it is the truth.
    """
    # Read-only until there is something to record: a cancel with nothing to do (or a
    # bad --point) leaves the store's file as it was, WAL checkpoint included.
    with open_store(store_url, readonly=True) as store:
        campaign = campaign_for_write(store, ref, "cancel")  # a doubtful reference: refused, naming the ids
        all_points, _ = effective_points(store, campaign)
    if points:
        known = {p["idx"] for p in all_points}
        missing = sorted(set(points) - known)
        if missing:
            raise NotFoundError(f"campaign {campaign['id']} has no point {missing[0]}; points are 0..{len(all_points) - 1}")
    # A point whose job already ended (its effective state is final: it died, timed out, was
    # lost) has nothing to signal: it keeps that state, and its job is never sent anywhere.
    chosen = [p for p in all_points if (not points or p["idx"] in points) and p["stored_state"] in ACTIVE_STATES
              and not is_final(p["state"])]
    # A job is signalled only when the user's signature of it verifies (campaign.common.signing.
    # sign_job, written by the launch, resume, retry or wave that submitted it): never on the
    # word of a file in a folder, nor of a row anyone who can write the store could craft.
    key = signing_key()
    untied = {p["id"]: why for p in chosen if p.get("job_id") and (why := untied_job(campaign, p, key))}
    if untied:  # never signalled, nor recorded: its job may be anyone's
        shown = "; ".join(f"#{p['idx']}: {untied[p['id']]}" for p in chosen if p["id"] in untied)
        print(printable(f"warning: {len(untied)} point(s) not signalled, their job not tied to campaign "
                        f"{campaign['id']} ({shown})"), file=sys.stderr)
    chosen = [p for p in chosen if p["id"] not in untied]
    cancelled = 0
    if chosen:
        by_exec: dict[str, list[dict]] = {}
        for p in chosen:
            by_exec.setdefault(p["executor"], []).append(p)
        signalled_at = time.time()
        for executor, pts in by_exec.items():
            asked = [p for p in pts if p.get("job_id")]
            try:
                backend = get_backend(executor)
            except ValueError:  # a stored executor no backend has: its points are lost (campaign.observe.state)
                backend = None
            done = set(backend.cancel(asked)) if backend is not None else set()
            for p in asked:  # a stored job id the backend would not take (campaign.common.ids): said, not sent
                if p["id"] not in done:
                    print(printable(f"warning: point {p['idx']} not cancelled: {p.get('reason') or 'its job id'}"),
                          file=sys.stderr)
        unfinished = [p for p in chosen if not is_final(p["state"])]  # ended ones (died, timed out) keep that truth
        if unfinished:
            with open_store(store_url) as store:
                never_sent = []  # waiting points cancelled: their attempts never went out
                for p in unfinished:
                    # A running job may report the interrupt as its failure before this line
                    # runs: that failure is the cancellation.
                    # Its end is the cancel; its start what the executor saw (status shows the
                    # elapsed time, which a read command never writes).
                    times = {"ended_at": signalled_at}
                    if p.get("started_at"):
                        times["started_at"] = p["started_at"]
                    if store.set_state(p["id"], "cancelled", "cancelled by campaign cancel",
                                       failed_since=signalled_at, **times):
                        cancelled += 1
                        if not p.get("job_id"):
                            never_sent.append(p["id"])
                store.close_open_attempts(never_sent, "cancelled", "cancelled by campaign cancel", signalled_at)
    print(printable(f"campaign {campaign['id']}: cancelled {cancelled} point(s)"
                    + (f"; {len(untied)} not signalled (their job is not tied to it)" if untied else "")))
    return 0


def untied_job(campaign: dict, p: dict, key: Optional[bytes]) -> Optional[str]:
    """Why point ``p``'s stored job cannot be tied to ``campaign`` (then it is never
    signalled), or None: its job folder must be the campaign's own (``<results>/jobs/<id>``)
    and its job id signed with the user's ``key`` (None: they have none, nothing is theirs)
    over the campaign, the point, its executor, job id and folder. A job recorded before
    campaign signed job ids (store version 6) has no signature: it is refused too, saying
    so (stop it by hand: campaign cannot tell it from one another user wrote)."""
    folder = p.get("job_folder")
    if not folder:
        return "no job folder stored"
    try:
        own = job_folder(campaign["results_dir"], campaign["id"]) if campaign.get("results_dir") else None
    except StoreError as exc:
        return str(exc)
    if own is None or os.path.normpath(str(folder)) != os.path.normpath(str(own)):
        return f"its job folder {folder} is not the campaign's" + (f" ({own})" if own else "")
    if key is None or not verify_job(key, campaign["id"], p):
        how = "has no signature" if not p.get("job_signature") else "is not signed with your key"
        return (f"job {p['job_id']} {how} (submitted before campaign signed job ids, or not by you; "
                "if it is yours, stop it by hand)")
    return None
