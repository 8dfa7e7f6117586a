"""Random images and labels, the same for a given (seed, split, index) on every rank and run."""

from __future__ import annotations

from typing import Any, Tuple

import torch
from torch.utils.data import Dataset

from campaign_datasets.synthetic import sizes as synthetic_sizes
from trainers.data import spec_value

# The pool of distinct images a synthetic dataset draws from: at most POOL_IMAGES, and no more
# than POOL_BYTES of them (a 3 x 224 x 224 image is 0.6 MB: 64 of them; 3 x 512 x 512: 21).
# Synthetic data measures a trainer's speed, not what it learns, so its images need not all
# differ; generating each one on access cost ~1.3 ms per 224px image on a CPU, 10.6 ms of
# every 8-image ViT-B/16 iteration on an H200 (29 % of its timed window, tests/golden/h200).
POOL_IMAGES = 64
POOL_BYTES = 64 << 20
_MASK = 0xFFFFFFFF


def _mix32(x: int) -> int:
    """A 32-bit integer hash (lowbias32, a bijection): a label per index without a generator."""
    x &= _MASK
    x ^= x >> 16
    x = (x * 0x7FEB352D) & _MASK
    x ^= x >> 15
    x = (x * 0x846CA68B) & _MASK
    return x ^ (x >> 16)


class SyntheticImages(Dataset):
    """``(image, label)``: standard-normal ``channels x image_size x image_size`` images
    (already "normalised") and uniform labels, no I/O.

    The images are a fixed pool (``POOL_IMAGES`` / ``POOL_BYTES``), generated once when the
    dataset is built (before any loader worker forks, which then share it); item ``i`` is
    pool image ``i % pool`` (neighbouring indices differ) with its own label, a hash of
    (seed, split, index). An item costs a lookup, so the data wait a synthetic run measures is
    the loader's batching and copying, not random number generation. The returned image is a
    view of the pool: read it, do not modify it in place (the loader's batching copies it)."""

    def __init__(self, *, channels: int = 3, image_size: int = 32, num_classes: int = 10,
                 length: int = 10_000, seed: int = 0, train: bool = True):
        if length < 1 or num_classes < 1:
            raise ValueError(f"length={length} and num_classes={num_classes} must be at least 1")
        self.shape = (channels, image_size, image_size)
        self.num_classes = num_classes
        self.length = length
        # torch's CPU generator keeps only 32 bits of a seed, so (seed, split) is folded into
        # 32 bits; the odd multiplier keeps distinct seeds apart.
        self._base = ((seed * 2 + (0 if train else 1)) * 0x85EBCA77) & _MASK
        image_bytes = 4 * channels * image_size * image_size
        self.pool_size = max(1, min(POOL_IMAGES, length, POOL_BYTES // max(1, image_bytes)))
        generator = torch.Generator()
        generator.manual_seed(self._base)
        self.pool = torch.randn((self.pool_size, *self.shape), generator=generator)

    def __len__(self) -> int:
        return self.length

    def label(self, index: int) -> int:
        """The label of item ``index`` (``0 <= index < len``): uniform over the classes."""
        return _mix32(self._base + index * 0x9E3779B1) % self.num_classes

    def __getitem__(self, index: int) -> Tuple[torch.Tensor, int]:
        if not -self.length <= index < self.length:
            raise IndexError(f"index {index} outside a synthetic dataset of {self.length}")
        index %= self.length
        return self.pool[index % self.pool_size], self.label(index)


def load(spec: Any, *, train: bool, image_size: int, channels: int, fraction: float, seed: int) -> SyntheticImages:
    """dataset=synthetic's loader (campaign_datasets/synthetic.py names it): ``dataset.length``
    samples (DEFAULT_SYNTHETIC_LENGTH when unset), of which ``fraction`` are kept; the test
    split (``train=False``) is the declaration's size of it (a fifth), from other seeds."""
    length = synthetic_sizes(spec, train)
    return SyntheticImages(channels=channels, image_size=image_size,
                           num_classes=int(spec_value(spec, "num_classes", 10)),
                           length=max(1, int(round(length * fraction))), seed=seed, train=train)
