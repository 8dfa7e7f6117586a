"""dataset=mnist: the idx files (``train-images-idx3-ubyte[.gz]`` ...) under ``dataset.root``."""

from __future__ import annotations

import os
import struct
from typing import List, Optional, Tuple

from campaign_datasets.files import head
from campaign_datasets.registry import DatasetDef, DatasetError

MNIST_IMAGES_MAGIC = 2051  # 0x00000803: unsigned bytes, 3 dimensions
MNIST_LABELS_MAGIC = 2049  # 0x00000801: unsigned bytes, 1 dimension


def _mnist_file(folder: str, stem: str) -> Optional[str]:
    # Uncompressed first, as torchvision does: it is what an extracted download leaves.
    for candidate in (stem, stem + ".gz"):
        path = os.path.join(folder, candidate)
        if os.path.isfile(path):
            return path
    return None


def locate(root: str, given: str) -> str:
    """The folder holding the idx files: ``root``, ``root/MNIST/raw`` or ``root/raw``."""
    for folder in (root, os.path.join(root, "MNIST", "raw"), os.path.join(root, "raw")):
        if _mnist_file(folder, "train-images-idx3-ubyte"):
            return folder
    raise DatasetError(f"dataset.root={given}: no MNIST files (train-images-idx3-ubyte[.gz]) found; "
                       f"download MNIST there or use dataset=synthetic")


def mnist_files(folder: str, train: bool, where: Optional[str] = None) -> Tuple[str, str]:
    """Paths of the (images, labels) idx files of a split in a resolved MNIST folder.

    ``where`` starts the error message (default: ``dataset.root=<folder>``).
    """
    prefix = "train" if train else "t10k"
    images = _mnist_file(folder, f"{prefix}-images-idx3-ubyte")
    labels = _mnist_file(folder, f"{prefix}-labels-idx1-ubyte")
    if images is None or labels is None:
        missing = f"{prefix}-{'images-idx3' if images is None else 'labels-idx1'}-ubyte[.gz]"
        raise DatasetError(f"{where or f'dataset.root={folder}'}: {missing} missing in {folder}; "
                           f"download MNIST there or use dataset=synthetic")
    return images, labels


def _product(shape: List[int]) -> int:
    total = 1
    for n in shape:
        total *= n
    return total


def _check_idx(path: str, magic: int, dims: int, where: str) -> Tuple[int, ...]:
    """Check an idx file's magic number, header length and (uncompressed) size; return its shape."""
    fix = "re-download MNIST"
    size = 4 + 4 * dims
    data = head(path, size, where, fix)
    if len(data) < size:
        raise DatasetError(f"{where}: {path} is truncated (header {len(data)} of {size} bytes); {fix}")
    found, *shape = struct.unpack(f">{1 + dims}I", data)
    if found != magic:
        raise DatasetError(f"{where}: {path} has magic number {found}, expected {magic}; {fix}")
    if not path.endswith(".gz"):  # a truncated download shows in the size; gz hides it until read
        expected = size + _product(shape)
        actual = os.path.getsize(path)
        if actual != expected:
            raise DatasetError(f"{where}: {path} holds {actual} bytes, its header promises {expected}; {fix}")
    return tuple(shape)


def check(folder: str, where: str, spec: object = None) -> None:
    """The idx headers of each split: magic numbers, sizes, as many images as labels."""
    for train in (True, False):
        if not train and not _mnist_file(folder, "t10k-images-idx3-ubyte"):
            continue  # the test split is optional: only validation reads it
        images, labels = mnist_files(folder, train, where)
        n_images = _check_idx(images, MNIST_IMAGES_MAGIC, 3, where)[0]
        n_labels = _check_idx(labels, MNIST_LABELS_MAGIC, 1, where)[0]
        if n_images != n_labels:
            raise DatasetError(f"{where}: {os.path.basename(images)} holds {n_images} images but "
                               f"{os.path.basename(labels)} holds {n_labels} labels; re-download MNIST")


def check_test(folder: str, where: str) -> None:
    """The test split validation reads (``experiment.validation=true``): both t10k files
    there (``check`` has read their headers when they are)."""
    for stem in ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
        if not _mnist_file(folder, stem):
            raise DatasetError(f"{where}: {stem}[.gz] missing in {folder}, and experiment.validation=true "
                               f"evaluates the test split; add MNIST's test files or set experiment.validation=false")


# Grey digits, repeated to 3 channels for RGB backbones.
DATASETS = (DatasetDef("mnist", locate=locate, check=check, channels=(1, 3), num_classes=10, train_images=60_000, test_images=10_000,
                       loader="trainers.data.mnist:load", check_test=check_test),)
