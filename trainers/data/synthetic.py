"""Random images and labels, the same for a given (seed, split, index) on every rank and run."""

from __future__ import annotations

from typing import Any, Tuple

import torch
from torch.utils.data import Dataset

from campaign_datasets.synthetic import sizes as synthetic_sizes
from trainers.data import spec_value


class SyntheticImages(Dataset):
    """``(image, label)``: standard-normal ``channels x image_size x image_size`` images
    (already "normalised") and uniform labels, generated on access: no I/O, no memory."""

    def __init__(self, *, channels: int = 3, image_size: int = 32, num_classes: int = 10,
                 length: int = 10_000, seed: int = 0, train: bool = True):
        if length < 1 or num_classes < 1:
            raise ValueError(f"length={length} and num_classes={num_classes} must be at least 1")
        self.shape = (channels, image_size, image_size)
        self.num_classes = num_classes
        self.length = length
        # torch's CPU generator keeps only 32 bits of a seed, so (seed, split, index) is
        # folded into 32 bits; the odd multiplier makes it one-to-one in the index.
        self._base = ((seed * 2 + (0 if train else 1)) * 0x85EBCA77) & 0xFFFFFFFF

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> Tuple[torch.Tensor, int]:
        if not -self.length <= index < self.length:
            raise IndexError(f"index {index} outside a synthetic dataset of {self.length}")
        generator = torch.Generator()
        generator.manual_seed((self._base + (index % self.length) * 0x9E3779B1) & 0xFFFFFFFF)
        label = int(torch.randint(self.num_classes, (1,), generator=generator))
        return torch.randn(self.shape, generator=generator), label


def load(spec: Any, *, train: bool, image_size: int, channels: int, fraction: float, seed: int) -> SyntheticImages:
    """dataset=synthetic's loader (campaign_datasets/synthetic.py names it): ``dataset.length``
    samples (DEFAULT_SYNTHETIC_LENGTH when unset), of which ``fraction`` are kept; the test
    split (``train=False``) is the declaration's size of it (a fifth), from other seeds."""
    length = synthetic_sizes(spec, train)
    return SyntheticImages(channels=channels, image_size=image_size,
                           num_classes=int(spec_value(spec, "num_classes", 10)),
                           length=max(1, int(round(length * fraction))), seed=seed, train=train)
