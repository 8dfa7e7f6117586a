"""dataset=cifar10 and dataset=cifar100: the python-version pickle batches under ``dataset.root``."""

from __future__ import annotations

import functools
import os
from typing import Any

from campaign_datasets.files import head
from campaign_datasets.registry import DatasetDef, DatasetError

CIFAR10_TRAIN = tuple(f"data_batch_{i}" for i in range(1, 6))


def locate(root: str, given: str, name: str) -> str:
    """The folder of the batches: ``cifar-10-batches-py`` / ``cifar-100-python`` (or ``root``)."""
    if name == "cifar10":
        folder, marker, label, archive = "cifar-10-batches-py", "data_batch_1", "CIFAR-10", "cifar-10-python.tar.gz"
        binary = "cifar-10-batches-bin"
    else:
        folder, marker, label, archive = "cifar-100-python", "train", "CIFAR-100", "cifar-100-python.tar.gz"
        binary = "cifar-100-binary"
    for candidate in (os.path.join(root, folder), root):
        if os.path.isfile(os.path.join(candidate, marker)):
            return candidate
    where = f"dataset.root={given}"
    if os.path.isfile(os.path.join(root, archive)):
        raise DatasetError(f"{where}: {archive} is not extracted; run `tar xzf {archive}` in {root}")
    if os.path.isdir(os.path.join(root, binary)) or os.path.basename(root) == binary:
        raise DatasetError(f"{where}: found the binary version ({binary}); "
                           f"download the python version ({archive}) instead")
    raise DatasetError(f"{where}: no {label} files ({folder}/{marker}) found; "
                       f"download {label} (python version) there or use dataset=synthetic")


def _check_pickle(path: str, where: str, label: str) -> None:
    fix = f"re-download {label} (python version)"
    if not os.path.isfile(path):
        raise DatasetError(f"{where}: {path} missing; {fix}")
    first = head(path, 2, where, fix)
    if not first:
        raise DatasetError(f"{where}: {path} is empty; {fix}")
    if first[:1] != b"\x80":  # PROTO opcode: the python-version batches are pickles (protocol 2)
        raise DatasetError(f"{where}: {path} is not a Python pickle (starts with {first!r}); {fix}")


def check(folder: str, where: str, spec: Any, name: str) -> None:
    """Each batch file is there and starts as a pickle (the test batch only when present)."""
    if name == "cifar10":
        label, required, optional = "CIFAR-10", CIFAR10_TRAIN + ("batches.meta",), ("test_batch",)
    else:
        label, required, optional = "CIFAR-100", ("train", "meta"), ("test",)
    for part in required:
        _check_pickle(os.path.join(folder, part), where, label)
    for part in optional:
        path = os.path.join(folder, part)
        if os.path.exists(path):
            _check_pickle(path, where, label)


def check_test(folder: str, where: str, name: str) -> None:
    """The test batch validation reads (``experiment.validation=true``): there, and a pickle."""
    label, part = ("CIFAR-10", "test_batch") if name == "cifar10" else ("CIFAR-100", "test")
    path = os.path.join(folder, part)
    if not os.path.isfile(path):
        raise DatasetError(f"{where}: {path} missing, and experiment.validation=true evaluates the test split; "
                           f"add {label}'s {part} (python version) or set experiment.validation=false")
    _check_pickle(path, where, label)


def _declare(name: str, num_classes: int) -> DatasetDef:
    return DatasetDef(name, locate=functools.partial(locate, name=name), check=functools.partial(check, name=name),
                      channels=(3,), num_classes=num_classes, loader="trainers.data.cifar:load",
                      train_images=50_000, test_images=10_000, check_test=functools.partial(check_test, name=name))


# Two variants of one format: one module, one declaration (and one conf file) each.
DATASETS = (_declare("cifar10", 10), _declare("cifar100", 100))
