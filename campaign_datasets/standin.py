"""Stand-ins for the studies' datasets, written on disk in the real downloads' formats.

No dataset can be downloaded on every machine a study is tried on (this project's CI
cannot reach one), so ``campaign datagen`` writes files that the real loaders read
exactly as they read the real ones: MNIST's idx files, CIFAR's pickled batches, ADE20K's
``ADEChallengeData2016`` tree of JPEG images and PNG annotations. The pixels are made up;
the formats, split sizes, image sizes and label ranges are the real ones, so that a data
loader does the work it does on the real dataset (decode, resize, crop, flip, distort,
collate) and a study's data wait is measured, not assumed away.

Sizes (``SIZES``): ``tests`` (a few files, seconds), ``small`` (tens to thousands of images,
for a reduced study on one machine) and ``full`` (the real split sizes: ADE20K 20,210 + 2,000,
MNIST 60,000 + 10,000, CIFAR 50,000 + 10,000). A launch counts an epoch
(``experiment.epochs``) by a dataset's declared split size, the real one: on the tests and
small sizes give a run its length in iterations, or use ``full`` (MNIST's and CIFAR's are
seconds to write; a ``dataset.fraction`` then takes a share of it as of the real data).

ADE20K's images are not of one size: the stand-in draws each image's shape from
``ADE_SHAPES``, an approximation of ADEChallengeData2016's (most images are landscape
with a 512-pixel short side, some portrait, a few square or smaller); its annotations are
regions of the 150 classes plus 0 ("other", ignored by the benchmark), so a JPEG holds
smooth regions as a photograph does and is about as large to decode.

Each writer is deterministic in its seed and leaves a ``STANDIN.txt`` in the dataset's
folder saying what wrote it: a stand-in is never taken for the real data.

Every file goes through the one door (campaign_door/write.py): each folder made fresh or
checked (this user's, writable by nobody else unless sticky), each file made new without
following a link and renamed into place, so a link planted at ``cifar-100-python/test``
or ``STANDIN.txt`` is refused, its target never written. A stand-in already there is
reused by a launch only when ``check_standin`` passes (its folders and files this
user's, no link); its batches are read through the door's restricted unpickler anyway.
"""

from __future__ import annotations

import gzip
import os
import pickle
import stat
import struct
from pathlib import Path
from typing import Optional, Sequence, Tuple, Union

import numpy as np

from campaign_datasets.standin_sizes import STANDINS, SIZES
from campaign_door import Folder, Refused, folder_problem, kind, open_folder

PathLike = Union[str, "os.PathLike[str]"]

CIFAR10_CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
# (width, height, weight): shapes an ADE20K stand-in's images are drawn from (module docstring)
ADE_SHAPES = ((683, 512, 0.45), (512, 683, 0.15), (512, 512, 0.10), (768, 512, 0.10), (640, 480, 0.10),
              (512, 384, 0.05), (384, 512, 0.05))
ADE_CLASSES = 150


class StandinError(ValueError):
    """A stand-in that cannot be written as asked (one line: what and the fix)."""


def _write(folder: Folder, name: str, data: bytes, gz: bool = False) -> None:
    if gz:
        folder.write(name + ".gz", gzip.compress(data, mtime=0))
    else:
        folder.write(name, data)


def _mark(folder: Path, name: str, counts: Tuple[int, int], seed: int) -> None:
    with open_folder(folder) as out:
        out.write("STANDIN.txt", (
            f"A stand-in for {name} written by campaign datagen (campaign_datasets/standin.py), seed {seed}: "
            f"{counts[0]} training and {counts[1]} test images in the real format, made-up pixels.\n").encode())


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
    with open_folder(root) as out:
        for prefix, count in (("train", n), ("t10k", n_test or max(1, n // 2))):
            images = rng.randint(0, 256, size=(count, 28, 28)).astype(np.uint8)
            labels = (np.arange(count) % 10).astype(np.uint8)
            _write(out, f"{prefix}-images-idx3-ubyte", idx_images(images), gz)
            _write(out, f"{prefix}-labels-idx1-ubyte", idx_labels(labels), gz)
    return root


def _pickle(folder: Folder, name: str, obj: dict, protocol: int = 2) -> None:
    # The real batches are Python 2 cPickle dumps, protocol 2, with byte-string keys. Python 3
    # writes a bytes payload at protocol 2 as latin-1 text (half again as large): a full-size
    # stand-in is written at protocol 4 (the same dicts; the door's unpickler reads both).
    folder.write(name, lambda fh: pickle.dump(obj, fh, protocol=protocol))


def _cifar_images(rng: np.random.RandomState, n: int) -> np.ndarray:
    # Rows of 3072 bytes: the 1024 red, then green, then blue values of a 32x32 image, row-major.
    return rng.randint(0, 256, size=(n, 3072)).astype(np.uint8)


def write_cifar10(root: PathLike, n_per_batch: int = 20, n_test: int = 0, seed: int = 0, protocol: int = 2) -> Path:
    """Write ``root/cifar-10-batches-py`` with data_batch_1..5, test_batch and batches.meta."""
    folder = Path(root) / "cifar-10-batches-py"
    rng = np.random.RandomState(seed)
    parts = [(f"data_batch_{i}", f"training batch {i} of 5", n_per_batch) for i in range(1, 6)]
    parts.append(("test_batch", "testing batch 1 of 1", n_test or n_per_batch))
    with open_folder(folder) as out:
        _write_cifar10(out, parts, rng, n_per_batch, protocol)
    return folder


def _write_cifar10(out: Folder, parts: list, rng: np.random.RandomState, n_per_batch: int, protocol: int) -> None:
    for filename, batch_label, count in parts:
        _pickle(out, filename, {
            b"batch_label": batch_label.encode(),
            b"labels": [int(x) for x in rng.randint(0, 10, size=count)],
            b"data": _cifar_images(rng, count),
            b"filenames": [f"img_{filename}_{i:05d}.png".encode() for i in range(count)],
        }, protocol)
    _pickle(out, "batches.meta", {
        b"num_cases_per_batch": n_per_batch,
        b"label_names": [name.encode() for name in CIFAR10_CLASSES],
        b"num_vis": 3072,
    })
    out.write("readme.html", b"<meta HTTP-EQUIV=\"REFRESH\" content=\"0; url=http://www.cs.toronto.edu/~kriz/cifar.html\">\n")


def write_cifar100(root: PathLike, n: int = 40, n_test: int = 0, seed: int = 0, protocol: int = 2) -> Path:
    """Write ``root/cifar-100-python`` with train, test and meta (fine and coarse labels)."""
    folder = Path(root) / "cifar-100-python"
    rng = np.random.RandomState(seed)
    with open_folder(folder) as out:
        for filename, batch_label, count in (("train", "training batch 1 of 1", n),
                                             ("test", "testing batch 1 of 1", n_test or max(1, n // 2))):
            fine = rng.randint(0, 100, size=count)
            _pickle(out, filename, {
                b"filenames": [f"img_{filename}_{i:05d}.png".encode() for i in range(count)],
                b"batch_label": batch_label.encode(),
                b"fine_labels": [int(x) for x in fine],
                b"coarse_labels": [int(x) // 5 for x in fine],
                b"data": _cifar_images(rng, count),
            }, protocol)
        _pickle(out, "meta", {
            b"fine_label_names": [f"fine_{i}".encode() for i in range(100)],
            b"coarse_label_names": [f"coarse_{i}".encode() for i in range(20)],
        })
    return folder


def ade_shape(rng: np.random.RandomState) -> Tuple[int, int]:
    """An image's (width, height), drawn from ``ADE_SHAPES``."""
    weights = np.array([w for _, _, w in ADE_SHAPES])
    k = rng.choice(len(ADE_SHAPES), p=weights / weights.sum())
    return ADE_SHAPES[k][0], ADE_SHAPES[k][1]


def ade_pair(rng: np.random.RandomState, width: int, height: int, noise: bool = False) -> Tuple[np.ndarray, np.ndarray]:
    """(RGB pixels, labels 0..150) of one image: rectangular regions of a few classes, each a
    colour with some texture (``noise``: uniform random pixels and labels instead)."""
    if noise:
        return (rng.randint(0, 256, size=(height, width, 3)).astype(np.uint8),
                rng.randint(0, ADE_CLASSES + 1, size=(height, width)).astype(np.uint8))
    cells = rng.randint(3, 9)  # regions across
    grid = rng.randint(0, ADE_CLASSES + 1, size=(max(2, cells * height // width), cells)).astype(np.uint8)
    rows = (np.arange(height) * grid.shape[0] // height)[:, None]
    cols = (np.arange(width) * grid.shape[1] // width)[None, :]
    labels = grid[rows, cols]
    palette = np.random.RandomState(1234).randint(0, 256, size=(ADE_CLASSES + 1, 3))
    pixels = palette[labels] + rng.normal(0.0, 6.0, size=(height, width, 3))
    return np.clip(pixels, 0, 255).astype(np.uint8), labels


def write_ade20k(root: PathLike, n_train: int = 16, n_val: int = 4, size: Optional[Tuple[int, int]] = None,
                 seed: int = 0, noise: bool = False) -> Path:
    """Write ``root/ADEChallengeData2016`` as in ADEChallengeData2016.zip (SceneParsing, 150 classes):
    ``images/{training,validation}/ADE_*.jpg`` with ``annotations/.../ADE_*.png`` (uint8
    labels 0..150, 0 "other"), ``sceneCategories.txt`` and ``objectInfo150.txt``.
    ``size`` (width, height): every image that size; None: drawn from ``ADE_SHAPES``."""
    from PIL import Image  # pillow: matplotlib's dependency, on the host as in the jobs

    folder = Path(root) / "ADEChallengeData2016"
    scenes = []
    with open_folder(folder) as out:
        for split, prefix, count in (("training", "ADE_train", n_train), ("validation", "ADE_val", n_val)):
            rng = np.random.RandomState([seed, 0 if split == "training" else 1])
            with out.folder(f"images/{split}") as images, out.folder(f"annotations/{split}") as annotations:
                for i in range(1, count + 1):
                    stem = f"{prefix}_{i:08d}"
                    width, height = size or ade_shape(rng)
                    pixels, labels = ade_pair(rng, width, height, noise)
                    image, label = Image.fromarray(pixels, "RGB"), Image.fromarray(labels, "L")
                    images.write(f"{stem}.jpg", lambda fh, im=image: im.save(fh, format="JPEG", quality=90))
                    annotations.write(f"{stem}.png", lambda fh, im=label: im.save(fh, format="PNG"))
                    scenes.append(f"{stem} scene_{i % 3}")
        out.write("sceneCategories.txt", ("\n".join(scenes) + "\n").encode())
        out.write("objectInfo150.txt", (
            "Idx\tRatio\tTrain\tVal\tName\n" + "".join(f"{i}\t0.01\t1\t1\tclass_{i}\n" for i in range(1, 151))).encode())
    return folder


def write_standin(name: str, root: PathLike, size: str = "small", seed: int = 0) -> Path:
    """Write the stand-in of dataset ``name`` at ``size`` under ``root`` (what ``dataset.root``
    then names); returns the dataset's own folder."""
    if name not in SIZES:
        raise StandinError(f"no stand-in for dataset {name!r}; available: {', '.join(STANDINS)}")
    if size not in SIZES[name]:
        raise StandinError(f"unknown size {size!r}; available: {', '.join(SIZES[name])}")
    train, test = SIZES[name][size]
    if name == "ade20k":
        folder = write_ade20k(root, train, test, seed=seed)
    elif name == "mnist":
        folder = write_mnist(Path(root) / "MNIST" / "raw", train, n_test=test, seed=seed)
    elif name == "cifar10":
        folder = write_cifar10(root, train // 5, n_test=test, seed=seed, protocol=4 if size == "full" else 2)
    else:
        folder = write_cifar100(root, train, n_test=test, seed=seed, protocol=4 if size == "full" else 2)
    _mark(folder, name, (train, test), seed)
    return folder


def is_standin(folder: PathLike) -> bool:
    """Whether ``folder`` (a dataset's own folder) holds a stand-in this module wrote."""
    return (Path(folder) / "STANDIN.txt").is_file()


def check_standin(folder: PathLike, root: PathLike) -> None:
    """``Refused`` (one line) unless the stand-in at ``folder`` (under ``root``) could only
    have been written by this user: ``root`` and every folder from it down to ``folder``'s
    files pass the door's folder check (``folder_problem``: reached without a link below
    ``root``), and every file there is a regular file of this user (or root). Whoever
    else could write them could have planted the batches a launch would reuse."""
    top, here = Path(os.path.abspath(root)), Path(os.path.abspath(folder))
    chain = [here, *[p for p in here.parents if p == top or top in p.parents]] if here != top else [top]
    for sub in reversed(chain):
        st = os.stat(sub) if sub == top else os.lstat(sub)
        problem = folder_problem(st)
        if problem:
            raise Refused(f"the stand-in's folder {sub} {problem}")
    todo = [here]
    while todo:
        with os.scandir(todo.pop()) as entries:
            for entry in entries:
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    problem = folder_problem(st)
                    if problem:
                        raise Refused(f"the stand-in's folder {entry.path} {problem}")
                    todo.append(Path(entry.path))
                elif not stat.S_ISREG(st.st_mode):
                    raise Refused(f"the stand-in's file {entry.path} is {kind(st.st_mode)}, not a regular file")
                elif st.st_uid not in (os.geteuid(), 0):
                    raise Refused(f"the stand-in's file {entry.path} belongs to another user (uid {st.st_uid})")


def has_files(name: str, root: PathLike) -> bool:
    """Whether ``root`` already holds dataset ``name`` where its loader looks (the registry's
    ``resolve_root``)."""
    from campaign_datasets.registry import DatasetError, resolve_root

    try:
        resolve_root({"name": name, "root": os.fspath(root)})
    except DatasetError:
        return False
    return True


__all__: Sequence[str] = ("STANDINS", "SIZES", "StandinError", "write_standin", "write_ade20k", "write_mnist",
                          "write_cifar10", "write_cifar100", "idx_images", "idx_labels", "is_standin", "has_files",
                          "check_standin")
