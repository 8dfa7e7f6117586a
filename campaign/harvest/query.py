"""SQL side of the harvest: one row per completed point (its latest completed
attempt), with the rank aggregates computed by the database."""

from __future__ import annotations

from typing import Optional, Sequence

from sqlalchemy import and_, func, select

from campaign_sql.schema import attempt, point, profile, rank_timing

FILTERS = ("platform", "trainer", "experiment", "gpus", "dataset")


def completed_points_query(campaign_ids: Sequence[str], where: Optional[dict] = None):
    """Select one row per completed point; ``where`` values are bound, never pasted."""
    last = (
        select(attempt.c.point_id, func.max(attempt.c.attempt_no).label("attempt_no"))
        .where(attempt.c.state == "completed")
        .group_by(attempt.c.point_id)
        .subquery("last_completed")
    )
    ranks = (
        select(
            rank_timing.c.attempt_id,
            func.max(rank_timing.c.wall_s).label("time_s"),  # the job's time: its slowest rank
            func.sum(rank_timing.c.images).label("images"),
            func.max(rank_timing.c.iterations).label("timed_iterations"),
            func.avg(rank_timing.c.iter_mean_s).label("iter_mean_s"),
            func.avg(rank_timing.c.iter_median_s).label("iter_median_s"),
            func.avg(rank_timing.c.data_wait_s).label("data_wait_s"),
            func.avg(rank_timing.c.compute_s).label("compute_s"),
            func.avg(rank_timing.c.comm_s).label("comm_s"),
            func.max(rank_timing.c.final_loss).label("final_loss"),
            func.count().label("ranks"),
        )
        .group_by(rank_timing.c.attempt_id)
        .subquery("ranks")
    )
    prof = (
        select(
            profile.c.attempt_id,
            func.avg(profile.c.gpu_util).label("gpu_util"),
            func.avg(profile.c.cpu_util).label("cpu_util"),
        )
        .group_by(profile.c.attempt_id)
        .subquery("prof")
    )
    q = (
        select(
            point.c.campaign_id, point.c.id.label("point_id"), point.c.idx, point.c.platform, point.c.trainer,
            point.c.experiment, point.c.dataset, point.c.gpus, point.c.nodes, point.c.repeat,
            point.c.batch_per_gpu, point.c.iterations, point.c.overrides,
            ranks.c.time_s, ranks.c.images, ranks.c.timed_iterations, ranks.c.iter_mean_s, ranks.c.iter_median_s,
            ranks.c.data_wait_s, ranks.c.compute_s, ranks.c.comm_s, ranks.c.final_loss, ranks.c.ranks,
            prof.c.gpu_util, prof.c.cpu_util,
        )
        .select_from(
            point.join(last, last.c.point_id == point.c.id)
            .join(attempt, and_(attempt.c.point_id == point.c.id, attempt.c.attempt_no == last.c.attempt_no))
            .join(ranks, ranks.c.attempt_id == attempt.c.id)
            .outerjoin(prof, prof.c.attempt_id == attempt.c.id)
        )
        .where(point.c.campaign_id.in_(list(campaign_ids)))
        .order_by(point.c.idx)
    )
    for key, values in (where or {}).items():
        if key not in FILTERS:
            raise KeyError(key)
        q = q.where(getattr(point.c, key).in_(list(values)))
    return q
