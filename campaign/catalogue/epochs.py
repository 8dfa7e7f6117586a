"""Epochs of a point's training share, counted as the job's loader counts them: one
definition for the launch (campaign/launch/plan.py sizes ``experiment.epochs`` with it) and
for harvest (campaign/harvest/epochs.py: which points train the same epochs of the same
data). Pure functions of a resolved config; torch-free.
"""

from __future__ import annotations

from typing import Any, Optional


def training_images(c: dict[str, Any]) -> int | None:
    """Images of the point's training share: the dataset's training split (its declaration)
    times ``experiment.dataset_fraction_per_gpu`` x gpus (capped at 1) when set, else
    ``dataset.fraction``, rounded as the job's share is (at least one); None when the
    declaration does not know its size."""
    from campaign_datasets import split_images

    whole = split_images(c["dataset"], train=True)
    if whole is None:
        return None
    per_gpu = c["experiment"].get("dataset_fraction_per_gpu")
    share = min(1.0, float(per_gpu) * int(c["gpus"])) if per_gpu is not None else float(c["dataset"].get("fraction") or 1.0)
    return whole if share >= 1.0 else max(1, int(round(whole * share)))


def iterations_per_epoch(images: int, batch_per_gpu: int, gpus: int, grad_accum: int = 1) -> int:
    """Iterations of one epoch as the job's loader makes it: every GPU takes whole batches of
    its equal part of ``images`` (the partial last batch is dropped), ``grad_accum`` of
    them per iteration (the last iteration of an epoch may take fewer)."""
    batches = images // (batch_per_gpu * gpus)
    return -(-batches // max(1, grad_accum))


def whole_epochs(c: Any, global_batch: Optional[int], iterations: Optional[int]) -> Optional[tuple[int, int, int]]:
    """(epochs E, training images N, images an epoch trains) of a point that ran exactly E
    whole epochs of its training share: ``experiment.epochs`` set and warm-up + timed
    iterations = E x (N // global batch), one loader batch an iteration (no gradient
    accumulation). The epoch trains N less its dropped last partial batch. None for any
    other point, or a config that does not say (a store others wrote: never an error)."""
    try:
        exp = c["experiment"]
        epochs = exp.get("epochs")
        if not isinstance(epochs, int) or isinstance(epochs, bool) or epochs <= 0 or int(exp.get("grad_accum") or 1) != 1:
            return None
        images = training_images(c)
        if images is None or not global_batch or global_batch <= 0 or iterations is None:
            return None
        per_epoch = images // int(global_batch)
        if per_epoch <= 0 or int(exp.get("warmup_iterations") or 0) + int(iterations) != epochs * per_epoch:
            return None
        return epochs, images, per_epoch * int(global_batch)
    except (KeyError, TypeError, ValueError, AttributeError):  # DatasetError is a ValueError
        return None
