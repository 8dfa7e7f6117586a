"""Tiny datasets written in the exact on-disk formats of the real downloads.

No dataset can be downloaded where the tests run, so these writers produce the same
bytes layout (idx headers, pickled dicts with bytes keys, ADE20K's folder tree) at a
few KiB, deterministically. Each returns the folder a loader resolves to.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence, Tuple, Union

import numpy as np
from PIL import Image

from campaign_datasets.standin import (CIFAR10_CLASSES, idx_images, idx_labels, write_cifar10,  # noqa: F401
                                       write_cifar100, write_mnist)
from campaign_datasets.standin import write_ade20k as _write_ade20k

PathLike = Union[str, "os.PathLike[str]"]


def write_ade20k(root: PathLike, n_train: int = 4, n_val: int = 2, size: Tuple[int, int] = (64, 48),
                 seed: int = 0) -> Path:
    """Write ``root/ADEChallengeData2016`` (campaign_datasets.standin.write_ade20k) with
    ``size`` (width, height) images of uniform noise: a few KiB. Annotations are
    single-channel PNGs of uint8 labels in 0..150, 0 meaning "other" (ignored)."""
    return _write_ade20k(root, n_train, n_val, size=size, seed=seed, noise=True)


def write_imagefolder(root: PathLike, classes: Sequence[str] = ("cat", "dog", "fish"), per_class: int = 3,
                      size: Tuple[int, int] = (40, 30), splits: Sequence[str] = ("train", "val"),
                      seed: int = 0) -> Path:
    """Write ImageNet-style ``root/<split>/<class>/<class>_<i>.JPEG`` RGB images; returns ``root``."""
    root = Path(root)
    rng = np.random.RandomState(seed)
    width, height = size
    for split in splits:
        for cls in classes:
            (root / split / cls).mkdir(parents=True, exist_ok=True)
            for i in range(per_class):
                pixels = rng.randint(0, 256, size=(height, width, 3)).astype(np.uint8)
                Image.fromarray(pixels, "RGB").save(root / split / cls / f"{cls}_{i}.JPEG", "JPEG")
    return root
