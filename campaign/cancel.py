"""``campaign cancel``: stop a campaign's unfinished points through their executors."""

from __future__ import annotations

import time
from typing import Optional, Sequence

from campaign.backends import get_backend
from campaign.errors import NotFoundError
from campaign.store import open_store
from campaign_sql.schema import ACTIVE_STATES


def cancel(ref: Optional[str], *, store_url: str, points: Optional[Sequence[int]] = None) -> int:
    with open_store(store_url) as store:
        campaign = store.resolve_campaign(ref)
        all_points = store.points(campaign["id"])
        if points:
            known = {p["idx"] for p in all_points}
            missing = sorted(set(points) - known)
            if missing:
                raise NotFoundError(f"campaign {campaign['id']} has no point {missing[0]}; points are 0..{len(all_points) - 1}")
        chosen = [p for p in all_points if (not points or p["idx"] in points) and p["state"] in ACTIVE_STATES]
        by_exec: dict[str, list[dict]] = {}
        for p in chosen:
            by_exec.setdefault(p["executor"], []).append(p)
        cancelled: list[int] = []
        signalled_at = time.time()
        for executor, pts in by_exec.items():
            cancelled += get_backend(executor).cancel(pts)
        for pid in cancelled:
            # A running job may report the interrupt as its failure before this line runs:
            # that failure is the cancellation.
            store.set_state(pid, "cancelled", "cancelled by campaign cancel", failed_since=signalled_at)
    print(f"campaign {campaign['id']}: cancelled {len(cancelled)} point(s)")
    return 0
