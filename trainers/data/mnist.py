"""MNIST read from the standard idx files (``train-images-idx3-ubyte`` ..., gzipped or not)."""

from __future__ import annotations

import struct
from typing import Any, Tuple

import numpy as np
import torch
from torch.utils.data import Dataset

from campaign_datasets import MNIST_IMAGES_MAGIC, MNIST_LABELS_MAGIC, mnist_files, resolve_root
from campaign_door import read_file, read_gz
from trainers.data import share_indices, spec_value, to_model_input

MEAN, STD = (0.1307,), (0.3081,)  # of the 60,000 training images, pixels scaled to [0, 1]


IDX_MAX_BYTES = 256 << 20  # an idx file read at most (decompressed too): MNIST's train images are 47 MB


def read_idx(path: str, magic: int) -> np.ndarray:
    """An idx file of unsigned bytes as an array of the shape its header gives, read
    through the door (no link, at most IDX_MAX_BYTES, a gzip file decompressed within it)."""
    data = (read_gz if path.endswith(".gz") else read_file)(path, IDX_MAX_BYTES)
    dims = magic & 0xFF  # the magic's last byte is the number of dimensions, its third 0x08: uint8
    header = 4 + 4 * dims
    if len(data) < header:
        raise ValueError(f"{path}: truncated idx header ({len(data)} of {header} bytes)")
    found, *shape = struct.unpack(f">{1 + dims}I", data[:header])
    if found != magic:
        raise ValueError(f"{path}: magic number {found}, expected {magic}")
    count = int(np.prod(shape))
    if len(data) - header != count:
        raise ValueError(f"{path}: {len(data) - header} data bytes, the header promises {count}")
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(shape).copy()


class MNIST(Dataset):
    """``(image, label)``: grey 28x28 digits, normalised, resized to ``image_size`` and
    repeated to ``channels`` (1 or 3) for backbones that expect RGB."""

    def __init__(self, root: str, *, train: bool = True, image_size: int = 28, channels: int = 1,
                 fraction: float = 1.0, seed: int = 0):
        if channels not in (1, 3):
            raise ValueError(f"MNIST feeds 1 or 3 channels, not {channels}")
        folder = resolve_root({"name": "mnist", "root": root})
        images_path, labels_path = mnist_files(folder, train)
        images = read_idx(images_path, MNIST_IMAGES_MAGIC)
        labels = read_idx(labels_path, MNIST_LABELS_MAGIC)
        if len(images) != len(labels):
            raise ValueError(f"{images_path}: {len(images)} images but {len(labels)} labels")
        if train and fraction < 1.0:
            keep = share_indices(len(images), fraction, seed)
            images, labels = images[keep], labels[keep]
        self.images = torch.from_numpy(images)  # N x 28 x 28 uint8
        self.labels = torch.from_numpy(labels.astype(np.int64))
        self.image_size = image_size
        self.channels = channels
        self.num_classes = 10

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> Tuple[torch.Tensor, int]:
        image = to_model_input(self.images[index][None], MEAN, STD, self.image_size, self.channels)
        return image, int(self.labels[index])


def load(spec: Any, *, train: bool, image_size: int, channels: int, fraction: float, seed: int) -> MNIST:
    """dataset=mnist's loader (campaign_datasets/mnist.py names it)."""
    return MNIST(spec_value(spec, "root"), train=train, image_size=image_size, channels=channels,
                 fraction=fraction, seed=seed)
