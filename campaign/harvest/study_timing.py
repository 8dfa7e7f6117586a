"""The DataParallel study's timing figures by its own definitions: its Figs 1a, 2b, 3b and 5a
(training) and 4a-b (inference) plot "the average computation time, communication time for
each iteration" (dataparallel-frozen-backbones-a6000.txt, section 4.1), computation and
communication as its section 2 times them, which campaign records as the ``study.*`` breakdown
rows (trainers/dp_study.py, ``trainer.params.study_timing=true``):

study.compute       training: "resetting the gradients ..., a forward pass ..., computing the
                    loss ..., the backward pass ..., updating the parameters" (section 2, (i)
                    Computation time); inference: "time taken for each forward pass" (section
                    2, last paragraph)
study.comm_barrier  training: "running torch.distributed.barrier() ... to synchronize the
                    weights" after the update (section 2, (ii) Communication time)
study.comm_sync     inference: "time taken to run torch.cuda.synchronize()" (section 2, last
                    paragraph)

``timing_stack`` is the breakdown figure's stack: per point, these rows where the point timed
them (the study's computation below its communication: together, the iteration less its data
wait), campaign's own disjoint phases (utilisation.phase_stack) for any other point.
"""

from __future__ import annotations

from typing import Optional

import polars as pl

from campaign.harvest.utilisation import phase_stack
from campaign.harvest.views import KEYS, SERIES, with_optional

# (phase, legend label), bottom to top
STUDY_STACK = [
    ("study.compute", "computation (the study's, section 2: study.compute)"),
    ("study.comm_barrier", "communication: the barrier after the update (study.comm_barrier)"),
    ("study.comm_sync", "communication: cuda.synchronize after the forward (study.comm_sync)"),
]
STUDY_TITLE = "Computation and communication per iteration (the study's, section 2)"


def study_stack(points: pl.DataFrame, engine_phases: Optional[pl.DataFrame]) -> pl.DataFrame:
    """Per series and GPU count, the mean seconds per iteration of each ``STUDY_STACK`` row
    (the means over repeats of the ranks' mean per-iteration seconds, as phase_stack's), in
    phase_stack's schema; no row for a point that did not time them."""
    empty = phase_stack(points.head(0), None)
    if points.height == 0 or engine_phases is None or engine_phases.height == 0 or "attempt_id" not in points.columns:
        return empty
    names = [p for p, _ in STUDY_STACK]
    rows = (
        engine_phases.filter(pl.col("phase").is_in(names) & pl.col("mean_s").is_not_null())
        .join(with_optional(points).select(KEYS + ["attempt_id"]), on="attempt_id", how="inner")
        .group_by(KEYS + ["phase"])
        .agg(pl.col("mean_s").cast(pl.Float64).mean().alias("per_iteration_s"), pl.len().alias("repeats"))
    )
    return (rows.with_columns(pl.col("phase").replace_strict(dict(STUDY_STACK)).alias("label"),
                              pl.col("phase").replace_strict({p: i for i, p in enumerate(names)},
                                                             return_dtype=pl.Int64).alias("order"))
            .sort(SERIES + ["gpus", "order"], nulls_last=True).select(empty.columns).cast(empty.schema))


def timing_stack(points: pl.DataFrame, engine_phases: Optional[pl.DataFrame]) -> pl.DataFrame:
    """The breakdown figure's stack: the study's rows (``study_stack``) for the points that
    timed them, campaign's phases (``phase_stack``) for the others."""
    study = study_stack(points, engine_phases)
    if study.height == 0:
        return phase_stack(points, engine_phases)
    on = SERIES + ["gpus"]  # a stack's keys (placement follows from nodes and gpus)
    timed = set(study.select(on).unique().rows())
    own = phase_stack(points, engine_phases)
    own = own.filter(pl.Series([k not in timed for k in own.select(on).rows()], dtype=pl.Boolean)) if own.height else own
    return pl.concat([study, own], how="vertical_relaxed").sort(SERIES + ["gpus", "order"], nulls_last=True)


def is_study_stack(stack: pl.DataFrame) -> bool:
    """Whether a stack holds the study's rows (its figure takes the study's title)."""
    return stack.height > 0 and stack["phase"].str.starts_with("study.").any()
