"""CIFAR-10 / CIFAR-100 read from the python-version pickle batches."""

from __future__ import annotations

import os
from typing import Any, Dict, List, Tuple

import numpy as np
import torch
from torch.utils.data import Dataset

from campaign_datasets import CIFAR10_TRAIN, resolve_root
from campaign_door import load_cifar
from trainers.data import share_indices, spec_value, to_model_input

# Per-channel statistics of each training set, pixels scaled to [0, 1].
STATS = {
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "cifar100": ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
}
LAYOUT = {  # variant: (train files, test files, meta file, label key, class-name key, classes)
    "cifar10": (CIFAR10_TRAIN, ("test_batch",), "batches.meta", "labels", "label_names", 10),
    "cifar100": (("train",), ("test",), "meta", "fine_labels", "fine_label_names", 100),
}


def load_batch(path: str) -> Dict[str, Any]:
    """One pickled batch with str keys (the real files are Python 2 pickles with byte-string
    keys), read through the door: no link, at most CIFAR_MAX_BYTES, and a restricted
    unpickler that admits only the dicts, lists, strings, numbers and numpy arrays the
    format holds (campaign_door/unpickle.py): a planted batch naming ``os.system`` is
    refused in one line, never run."""
    raw = load_cifar(path)  # latin1 reads Python 2 str and numpy arrays alike; keys may come back bytes or str
    return {key.decode() if isinstance(key, bytes) else key: value for key, value in raw.items()}


def _names(values: List[Any]) -> List[str]:
    return [v.decode() if isinstance(v, bytes) else str(v) for v in values]


class CIFAR(Dataset):
    """``(image, label)``: 32x32 RGB images, normalised and resized to ``image_size``
    (e.g. 224 for ViT-B/16); ``fraction`` keeps a seeded share of the training set."""

    def __init__(self, root: str, *, variant: str = "cifar10", train: bool = True, image_size: int = 32,
                 channels: int = 3, fraction: float = 1.0, seed: int = 0):
        if variant not in LAYOUT:
            raise ValueError(f"unknown CIFAR variant {variant!r}; available: {', '.join(LAYOUT)}")
        if channels != 3:
            raise ValueError(f"CIFAR feeds 3 channels, not {channels}")
        train_files, test_files, meta_file, label_key, names_key, num_classes = LAYOUT[variant]
        folder = resolve_root({"name": variant, "root": root})
        data, labels = [], []
        for part in train_files if train else test_files:
            batch = load_batch(os.path.join(folder, part))
            data.append(np.asarray(batch["data"], dtype=np.uint8).reshape(-1, 3, 32, 32))
            labels.extend(int(x) for x in batch[label_key])
        images = np.concatenate(data)
        targets = np.asarray(labels, dtype=np.int64)
        if len(images) != len(targets):
            raise ValueError(f"{folder}: {len(images)} images but {len(targets)} labels")
        if train and fraction < 1.0:
            keep = share_indices(len(images), fraction, seed)
            images, targets = images[keep], targets[keep]
        self.images = torch.from_numpy(np.ascontiguousarray(images))  # N x 3 x 32 x 32 uint8
        self.labels = torch.from_numpy(targets)
        self.classes = _names(load_batch(os.path.join(folder, meta_file))[names_key])
        self.num_classes = num_classes
        self.mean, self.std = STATS[variant]
        self.image_size = image_size

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> Tuple[torch.Tensor, int]:
        image = to_model_input(self.images[index], self.mean, self.std, self.image_size, 3)
        return image, int(self.labels[index])


def load(spec: Any, *, train: bool, image_size: int, channels: int, fraction: float, seed: int) -> CIFAR:
    """dataset=cifar10's and dataset=cifar100's loader (campaign_datasets/cifar.py names it)."""
    return CIFAR(spec_value(spec, "root"), variant=spec_value(spec, "name"), train=train, image_size=image_size,
                 channels=channels, fraction=fraction, seed=seed)
