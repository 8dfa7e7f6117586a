"""Epochs in harvest: which points train the same epochs of the same data, and the time
per epoch as a study that counts epochs defines it.

same epochs  a strong-scaling point and its 1-GPU baseline that each ran E whole epochs of
             the same training share (``experiment.epochs``, the same dataset and share:
             campaign.catalogue.epochs.whole_epochs) train the same data, as the ViT study's
             strong scaling does ("Strong scaling is achieved by fixing the workload by
             using the entire dataset for increasing number of GPUs", vit-deepspeed-
             scaling.txt, section IV-A), even though their images differ a little: each
             epoch drops its last partial batch, which is larger with a larger global
             batch, and the warm-up iterations (outside the timed window) take more
             images at N GPUs. views.scaling_table keeps their speedup and efficiency and
             names those images in ``note`` (``dropped_note``); the same-work rule
             (views.SAME_WORK_TOLERANCE) stays for points whose work really differs.
epoch_s      the ViT study's time per epoch: "the model is trained for 5 epochs for all
             experiments and averaged when plotting the results (time in seconds)"
             (section IV-A): the mean over *all* the run's epochs, the first one included;
             and an epoch ends at a barrier ("torch.distributed.barrier() ensures that all
             processes synchronize at the end of each epoch", section III), so an epoch's
             time is its slowest rank's (``with_epoch_times``).
"""

from __future__ import annotations

from typing import Optional, Sequence

import polars as pl

from campaign.catalogue.epochs import whole_epochs

EPOCH_COLUMNS = {"epochs": pl.Int64, "train_images": pl.Int64, "epoch_images": pl.Int64}
EPOCH_PHASE = r"^epoch_\d+$"  # a trainer's per-epoch breakdown rows (trainers/evaluate.py epoch_rows, vit)


def epoch_columns(configs: Sequence[object], global_batches: Sequence[object],
                  iterations: Sequence[object]) -> list[pl.Series]:
    """Per point: ``epochs`` (E), ``train_images`` (its training share) and ``epoch_images``
    (the images an epoch trains: the share less its dropped partial batch) where the point
    ran exactly E whole epochs of its share (whole_epochs); nulls elsewhere."""
    rows = [whole_epochs(c, gb, it) if isinstance(c, dict) else None
            for c, gb, it in zip(configs, global_batches, iterations)]
    return [pl.Series(name, [r[i] if r else None for r in rows], dtype=dtype)
            for i, (name, dtype) in enumerate(EPOCH_COLUMNS.items())]


def same_epochs(mine: str = "", base: str = "_1") -> pl.Expr:
    """A point that trains the same whole epochs of the same share as its 1-GPU baseline
    (columns ``epochs``/``train_images`` and the baseline's with suffix ``base``)."""
    return (pl.col("epochs").is_not_null() & (pl.col("epochs") == pl.col(f"epochs{base}"))
            & (pl.col("train_images") == pl.col(f"train_images{base}"))).fill_null(False)


def _n(col: str) -> pl.Expr:
    """An integer column with thousands separators (245,760)."""
    return pl.col(col).cast(pl.Int64).map_elements(lambda v: f"{v:,}", return_dtype=pl.Utf8)


def dropped_note() -> pl.Expr:
    """What differs between a same-epochs point's planned images and its baseline's: the
    images each epoch drops (its last partial batch) here and on 1 GPU, and that the warm-up
    iterations (outside the timed window) take the rest."""
    return pl.format(
        "the same {} epochs of {} images as on 1 GPU, so speedup kept ({} timed images against {}: each epoch "
        "drops its last partial batch, {} images here, {} on 1 GPU; the warm-up iterations, untimed, take the rest)",
        pl.col("epochs"), _n("train_images"), _n("images_planned"), _n("images_1"),
        _n("dropped"), _n("dropped_1"))


def with_epoch_times(points: pl.DataFrame, phases: Optional[pl.DataFrame]) -> pl.DataFrame:
    """``epoch_s``: a point's mean seconds per epoch over all its epochs (the first, warm-up
    and start-up in it, included), each epoch its slowest rank's (``max_total_s`` of its
    ``epoch_<i>`` breakdown row; the ranks' mean where a frame has no maximum): the module
    docstring's definition. Null for a point with no epoch rows."""
    if phases is None or phases.height == 0 or "phase" not in phases.columns:
        return points.with_columns(pl.lit(None, dtype=pl.Float64).alias("epoch_s"))
    slowest = pl.col("max_total_s") if "max_total_s" in phases.columns else pl.col("total_s")
    epochs = (phases.filter(pl.col("phase").cast(pl.Utf8).str.contains(EPOCH_PHASE))
              .group_by("attempt_id").agg(slowest.cast(pl.Float64).mean().alias("epoch_s")))
    return points.join(epochs, on="attempt_id", how="left")
