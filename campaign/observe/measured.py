"""Which measured rates an estimate may use (issue #41, finding 6).

A store that a group shares holds everyone's campaigns, and anyone who can write it can
add one: a campaign dated 2100 with ``wall_s=1e-6`` was once "the latest campaign that
ran this work" for every user, and let a launch estimated at 71 GPU-hours pass
``max_gpu_hours=1`` at 0.0085. So a measured rate is a *candidate*, taken in this order
and only when it passes every check:

1. **created no later than now**: a campaign dated more than ``FUTURE_SKEW_S`` ahead
   (the store's own allowance for clocks, campaign.store.store) is never a candidate;
2. **your own campaigns first**: a campaign is yours when its stored ``user`` is the
   one a launch of yours would record now (campaign.store.resolve.current_user: the
   connecting role of a PostgreSQL store, whose group trigger records it and nobody can
   forge it; the login name for SQLite, whose file is trusted to whoever can write it).
   Your latest campaign of the work, then others' latest (the estimate names whose);
3. **within a sane factor of the trainer's declaration** (``estimate.trusted``, checked
   against the declaration of the config that asks, never one read from the store, whose
   platform peak could be forged too): a rate more than ``estimate.MAX_FASTER`` (10)
   times faster than the declared one is left out, from anyone (a FLOPs declaration at its stated
   MFU, 35 % unless measured, run 10 times faster means 3.5 times the GPU's peak; a
   time law is the time a run takes). A *slower* rate is kept: small work is
   overhead-bound (the suite's tiny synthetic nets run 10^4 times their FLOPs figure),
   and a rate too slow can only make an estimate stricter, never let a launch past its
   budget. Where the trainer declares nothing to check against, only your own
   campaigns' rates are used.

The estimate (``campaign.observe.estimate.point_cost``) says which campaign a rate came
from, and whose when not yours; a candidate it left out is named in its source.
"""

from __future__ import annotations

import math
import statistics
import time
from typing import Any, Iterable, Mapping, Optional, Sequence

from campaign.observe.estimate import Measured, work_key

def measured_rates(store: Any, platforms: Iterable[str], trainers: Iterable[str], *,
                   now: Optional[float] = None) -> dict[str, tuple[Measured, ...]]:
    """work_key -> the campaigns that measured it, best first (the module docstring's
    order: your latest, then others' latest, none dated ahead of ``now``), from the
    store's completed attempts of these platforms and trainers (one read-only query). A
    row whose config is past campaign.common.bounded's limits, or whose values are not
    numbers (a rate that is not a positive finite one included), is left out."""
    from sqlalchemy import Text, and_, cast, func, select

    from campaign.common.bounded import STORED, BoundError, loads
    from campaign.store.resolve import current_user
    from campaign.store.store import FUTURE_SKEW_S
    from campaign_sql.schema import attempt, campaign, point, rank_timing

    horizon = (time.time() if now is None else now) + FUTURE_SKEW_S
    me = current_user(store)
    per_rank = rank_timing.c.wall_s / func.nullif(rank_timing.c.iterations, 0)
    done = (select(attempt.c.id).select_from(attempt.join(point, point.c.id == attempt.c.point_id))
            .where(and_(attempt.c.state == "completed", point.c.platform.in_(sorted(set(platforms))),
                        point.c.trainer.in_(sorted(set(trainers))))))
    # the slowest rank's per attempt (grouped apart: PostgreSQL groups no JSON column)
    slowest = (select(rank_timing.c.attempt_id, func.max(per_rank).label("s_per_it"))
               .where(rank_timing.c.attempt_id.in_(done)).group_by(rank_timing.c.attempt_id).subquery("slowest"))
    q = (
        select(cast(point.c.config, Text), point.c.gpus, point.c.nodes, point.c.batch_per_gpu, campaign.c.id,
               campaign.c.created_at, campaign.c.user, slowest.c.s_per_it)
        .select_from(point.join(campaign, campaign.c.id == point.c.campaign_id)
                     .join(attempt, attempt.c.point_id == point.c.id)
                     .join(slowest, slowest.c.attempt_id == attempt.c.id))
        .where(campaign.c.created_at <= horizon)
    )
    # work -> campaign id -> (created, user, rates)
    found: dict[str, dict[str, tuple[float, Optional[str], list[float]]]] = {}
    with store.engine.connect() as conn:
        for config, gpus, nodes, batch, cid, created, user, s_per_it in conn.execute(q):
            if not (_positive(s_per_it) and _number(created) and created <= horizon) or batch is None:
                continue
            try:
                if isinstance(config, str):  # the stored text, parsed here within bounds
                    config = loads(config, f"the stored config of a point of campaign {cid}", budget=STORED)
                key = work_key(config if isinstance(config, Mapping) else {}, gpus, nodes, batch)
            except (BoundError, TypeError, ValueError, AttributeError):  # not what a launch stores
                continue
            user = user if isinstance(user, str) else None
            found.setdefault(key, {}).setdefault(str(cid), (float(created), user, []))[2].append(float(s_per_it))
    out = {}
    for key, campaigns in found.items():
        ranked = sorted(campaigns.items(), key=lambda kv: (me is not None and kv[1][1] == me, kv[1][0], kv[0]),
                        reverse=True)
        out[key] = tuple(Measured(statistics.median(rates), cid, user, me is not None and user == me)
                         for cid, (_, user, rates) in ranked)
    return out


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _positive(value: Any) -> bool:
    return _number(value) and value > 0


def launch_measured(points: Sequence[Any]) -> dict[str, tuple[Measured, ...]]:
    """The measured rates a launch's store holds for its points' platforms and trainers
    (read-only; {} when there is no store yet or it cannot be read)."""
    import os

    from campaign.common.errors import CampaignError
    from campaign.store import open_store
    from campaign_sql.engine import sqlite_path

    url = str(points[0].config["store"]["url"])
    try:
        path = sqlite_path(url)
        if path is not None and not os.path.isfile(path):
            return {}
        with open_store(url, readonly=True, busy_timeout_s=5.0) as store:
            return measured_rates(store, {p.platform for p in points}, {p.config["trainer"]["name"] for p in points})
    except (CampaignError, ValueError):
        return {}
    except Exception as exc:  # a database error: no measured rates, the estimate says where they came from
        if type(exc).__module__.startswith("sqlalchemy"):
            return {}
        raise
