"""``campaign cancel``: stop a campaign's unfinished points through their executors."""

from __future__ import annotations

import sys
import time
from typing import Optional, Sequence

from campaign.backends import get_backend
from campaign.common.errors import NotFoundError
from campaign.observe.state import effective_points, is_final
from campaign.store import find_campaign_noted, open_store
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
        campaign = find_campaign_noted(store, ref)  # a name shared by several: the latest, said on stderr
        all_points, _ = effective_points(store, campaign)
    if points:
        known = {p["idx"] for p in all_points}
        missing = sorted(set(points) - known)
        if missing:
            raise NotFoundError(f"campaign {campaign['id']} has no point {missing[0]}; points are 0..{len(all_points) - 1}")
    chosen = [p for p in all_points if (not points or p["idx"] in points) and p["stored_state"] in ACTIVE_STATES]
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
                for p in unfinished:
                    # A running job may report the interrupt as its failure before this line
                    # runs: that failure is the cancellation.
                    # Its end is the cancel; its start what the executor saw (status shows the
                    # elapsed time, which a read command never writes).
                    times = {"ended_at": signalled_at}
                    if p.get("started_at"):
                        times["started_at"] = p["started_at"]
                    cancelled += store.set_state(p["id"], "cancelled", "cancelled by campaign cancel",
                                                 failed_since=signalled_at, **times)
    print(printable(f"campaign {campaign['id']}: cancelled {cancelled} point(s)"))
    return 0
