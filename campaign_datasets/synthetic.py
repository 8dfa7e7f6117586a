"""dataset=synthetic: random images and labels generated on each rank (seeded), no folder.

Its training split is ``dataset.length`` images (DEFAULT_LENGTH when unset); its test split,
drawn from other seeds, ``dataset.test_length`` images, else a fifth of the training split
(CIFAR's 10,000 to 50,000), at least one image. Standing in for a trainer's study dataset
(campaign.launch.validate.reference_dataset), both are that dataset's declared sizes."""

from __future__ import annotations

from typing import Any

from campaign_datasets.registry import DatasetDef, value

DEFAULT_LENGTH = 10_000  # samples of dataset=synthetic when dataset.length is unset


def sizes(spec: Any, train: bool) -> int:
    """Images of the synthetic training (``train``) or test split of ``spec``."""
    length = int(value(spec, "length") or DEFAULT_LENGTH)
    if train:
        return length
    test = value(spec, "test_length")
    return int(test) if test else max(1, -(-length // 5))


DATASETS = (DatasetDef("synthetic", needs_root=False, loader="trainers.data.synthetic:load", sizes=sizes),)
