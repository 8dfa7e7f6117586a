"""Tiny datasets written in the exact on-disk formats of the real downloads.

No dataset can be downloaded where the tests run, so these writers produce the same
bytes layout (idx headers, pickled dicts with bytes keys, ADE20K's folder tree) at a
few KiB, deterministically. Each returns the folder a loader resolves to.
"""

from __future__ import annotations

import gzip
import os
import pickle
import struct
from pathlib import Path
from typing import Sequence, Tuple, Union

import numpy as np
from PIL import Image

PathLike = Union[str, "os.PathLike[str]"]

CIFAR10_CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def _write(path: Path, data: bytes, gz: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if gz:
        with gzip.open(str(path) + ".gz", "wb") as f:
            f.write(data)
    else:
        path.write_bytes(data)


def idx_images(images: np.ndarray) -> bytes:
    """An idx3-ubyte file: magic 2051, then count, rows, cols (big-endian uint32), then pixels."""
    n, rows, cols = images.shape
    return struct.pack(">IIII", 2051, n, rows, cols) + images.astype(np.uint8).tobytes()


def idx_labels(labels: np.ndarray) -> bytes:
    """An idx1-ubyte file: magic 2049, then count (big-endian uint32), then one byte per label."""
    return struct.pack(">II", 2049, len(labels)) + labels.astype(np.uint8).tobytes()


def write_mnist(root: PathLike, n: int = 64, gz: bool = False, n_test: int = 0, seed: int = 0) -> Path:
    """Write train-* (n samples) and t10k-* (n_test, default n // 2) idx files into ``root``."""
    root = Path(root)
    rng = np.random.RandomState(seed)
    for prefix, count in (("train", n), ("t10k", n_test or max(1, n // 2))):
        images = rng.randint(0, 256, size=(count, 28, 28)).astype(np.uint8)
        labels = (np.arange(count) % 10).astype(np.uint8)
        _write(root / f"{prefix}-images-idx3-ubyte", idx_images(images), gz)
        _write(root / f"{prefix}-labels-idx1-ubyte", idx_labels(labels), gz)
    return root


def _pickle(path: Path, obj: dict) -> None:
    # The real batches are Python 2 cPickle dumps, protocol 2, with byte-string keys.
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=2)


def _cifar_images(rng: np.random.RandomState, n: int) -> np.ndarray:
    # Rows of 3072 bytes: the 1024 red, then green, then blue values of a 32x32 image, row-major.
    return rng.randint(0, 256, size=(n, 3072)).astype(np.uint8)


def write_cifar10(root: PathLike, n_per_batch: int = 20, n_test: int = 0, seed: int = 0) -> Path:
    """Write ``root/cifar-10-batches-py`` with data_batch_1..5, test_batch and batches.meta."""
    folder = Path(root) / "cifar-10-batches-py"
    rng = np.random.RandomState(seed)
    parts = [(f"data_batch_{i}", f"training batch {i} of 5", n_per_batch) for i in range(1, 6)]
    parts.append(("test_batch", "testing batch 1 of 1", n_test or n_per_batch))
    for filename, batch_label, count in parts:
        _pickle(folder / filename, {
            b"batch_label": batch_label.encode(),
            b"labels": [int(x) for x in rng.randint(0, 10, size=count)],
            b"data": _cifar_images(rng, count),
            b"filenames": [f"img_{filename}_{i:05d}.png".encode() for i in range(count)],
        })
    _pickle(folder / "batches.meta", {
        b"num_cases_per_batch": n_per_batch,
        b"label_names": [name.encode() for name in CIFAR10_CLASSES],
        b"num_vis": 3072,
    })
    (folder / "readme.html").write_text("<meta HTTP-EQUIV=\"REFRESH\" content=\"0; url=http://www.cs.toronto.edu/~kriz/cifar.html\">\n")
    return folder


def write_cifar100(root: PathLike, n: int = 40, n_test: int = 0, seed: int = 0) -> Path:
    """Write ``root/cifar-100-python`` with train, test and meta (fine and coarse labels)."""
    folder = Path(root) / "cifar-100-python"
    rng = np.random.RandomState(seed)
    for filename, batch_label, count in (("train", "training batch 1 of 1", n),
                                         ("test", "testing batch 1 of 1", n_test or max(1, n // 2))):
        fine = rng.randint(0, 100, size=count)
        _pickle(folder / filename, {
            b"filenames": [f"img_{filename}_{i:05d}.png".encode() for i in range(count)],
            b"batch_label": batch_label.encode(),
            b"fine_labels": [int(x) for x in fine],
            b"coarse_labels": [int(x) // 5 for x in fine],
            b"data": _cifar_images(rng, count),
        })
    _pickle(folder / "meta", {
        b"fine_label_names": [f"fine_{i}".encode() for i in range(100)],
        b"coarse_label_names": [f"coarse_{i}".encode() for i in range(20)],
    })
    return folder


def write_ade20k(root: PathLike, n_train: int = 4, n_val: int = 2, size: Tuple[int, int] = (64, 48),
                 seed: int = 0) -> Path:
    """Write ``root/ADEChallengeData2016`` as in ADEChallengeData2016.zip (SceneParsing, 150 classes).

    ``size`` is (width, height). Annotations are single-channel PNGs of uint8 labels in
    0..150, 0 meaning "other" (ignored by the benchmark).
    """
    folder = Path(root) / "ADEChallengeData2016"
    rng = np.random.RandomState(seed)
    width, height = size
    scenes = []
    for split, prefix, count in (("training", "ADE_train", n_train), ("validation", "ADE_val", n_val)):
        (folder / "images" / split).mkdir(parents=True, exist_ok=True)
        (folder / "annotations" / split).mkdir(parents=True, exist_ok=True)
        for i in range(1, count + 1):
            stem = f"{prefix}_{i:08d}"
            pixels = rng.randint(0, 256, size=(height, width, 3)).astype(np.uint8)
            Image.fromarray(pixels, "RGB").save(folder / "images" / split / f"{stem}.jpg", quality=90)
            labels = rng.randint(0, 151, size=(height, width)).astype(np.uint8)
            Image.fromarray(labels, "L").save(folder / "annotations" / split / f"{stem}.png")
            scenes.append(f"{stem} scene_{i % 3}")
    (folder / "sceneCategories.txt").write_text("\n".join(scenes) + "\n")
    (folder / "objectInfo150.txt").write_text(
        "Idx\tRatio\tTrain\tVal\tName\n" + "".join(f"{i}\t0.01\t1\t1\tclass_{i}\n" for i in range(1, 151)))
    return folder


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
