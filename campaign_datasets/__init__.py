"""The datasets' on-disk layouts and their checks, shared by the launch and the jobs.

A neutral package (like ``campaign_sql`` and ``campaign_trace``): the standard library
only (no torch, numpy or PIL), importing nothing of ``campaign`` or ``trainers``, so both
sides use it and neither depends on the other. The launch (``campaign.datasets``) runs
``check_dataset`` on the login node before anything is submitted; it reads headers,
never whole files, so a wrong ``dataset.root`` costs one line at launch instead of a
queue wait and a failed job per sweep point. The job side (``trainers.data``) calls
``resolve_root``, ``mnist_files`` and ``imagefolder_split_dir``, so both sides agree on
which folder and which files are used.

Every refusal is a ``DatasetError`` with one actionable line; the launch reports it as
a configuration error, a job as its failure.
"""

from __future__ import annotations

import gzip
import os
import struct
import zlib
from collections.abc import Mapping
from typing import Any, List, Optional, Tuple



class DatasetError(ValueError):
    """A dataset the job could not read: its name, folder or files (one actionable line)."""


NAMES = ("ade20k", "cifar10", "cifar100", "imagefolder", "mnist", "synthetic")

# Classes each dataset's labels span: dataset.num_classes may not be smaller.
NUM_CLASSES = {"mnist": 10, "cifar10": 10, "cifar100": 100}
# Image channels the job side can feed: MNIST is grey (repeated to 3 for RGB backbones).
CHANNELS = {"mnist": (1, 3), "cifar10": (3,), "cifar100": (3,), "imagefolder": (1, 3)}

MNIST_IMAGES_MAGIC = 2051  # 0x00000803: unsigned bytes, 3 dimensions
MNIST_LABELS_MAGIC = 2049  # 0x00000801: unsigned bytes, 1 dimension
CIFAR10_TRAIN = tuple(f"data_batch_{i}" for i in range(1, 6))
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
_JPEG_MAGIC = b"\xff\xd8\xff"
_ADE_SAMPLE = 8  # image/annotation pairs whose stems are checked


def _get(spec: Any, key: str, default: Any = None) -> Any:
    """A field of a DatasetSpec, a DictConfig or a plain dict (the job's config section)."""
    if isinstance(spec, Mapping):
        return spec.get(key, default)
    return getattr(spec, key, default)


def _name(spec: Any) -> str:
    name = _get(spec, "name") or "synthetic"
    if name not in NAMES:
        raise DatasetError(f"unknown dataset {name!r}; available: {', '.join(NAMES)}")
    return name


def _root(spec: Any, name: str) -> str:
    root = _get(spec, "root")
    if not root:
        raise DatasetError(f"dataset.root is required for dataset={name}")
    path = os.path.abspath(os.path.expanduser(str(root)))
    if not os.path.isdir(path):
        raise DatasetError(f"dataset.root={root}: no such directory; point dataset.root at the "
                          f"folder holding {name} or use dataset=synthetic")
    return path


# ---------------------------------------------------------------------------- locating


def _mnist_file(folder: str, stem: str) -> Optional[str]:
    # Uncompressed first, as torchvision does: it is what an extracted download leaves.
    for candidate in (stem, stem + ".gz"):
        path = os.path.join(folder, candidate)
        if os.path.isfile(path):
            return path
    return None


def _locate_mnist(root: str, given: str) -> str:
    for folder in (root, os.path.join(root, "MNIST", "raw"), os.path.join(root, "raw")):
        if _mnist_file(folder, "train-images-idx3-ubyte"):
            return folder
    raise DatasetError(f"dataset.root={given}: no MNIST files (train-images-idx3-ubyte[.gz]) found; "
                      f"download MNIST there or use dataset=synthetic")


def _locate_cifar(root: str, given: str, name: str) -> str:
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


def _locate_ade20k(root: str, given: str) -> str:
    for candidate in (os.path.join(root, "ADEChallengeData2016"), root):
        if os.path.isdir(os.path.join(candidate, "images")):
            return candidate
    if os.path.isfile(os.path.join(root, "ADEChallengeData2016.zip")):
        raise DatasetError(f"dataset.root={given}: ADEChallengeData2016.zip is not extracted; "
                          f"run `unzip ADEChallengeData2016.zip` in {root}")
    raise DatasetError(f"dataset.root={given}: no ADE20K files (ADEChallengeData2016/images) found; "
                      f"download ADEChallengeData2016.zip there or use dataset=synthetic")


def resolve_root(spec: Any) -> str:
    """The absolute folder a job reads ``spec``'s dataset from ("" for synthetic).

    MNIST: the folder holding the idx files (``root``, ``root/MNIST/raw`` or ``root/raw``);
    CIFAR: ``cifar-10-batches-py`` / ``cifar-100-python`` (or ``root`` itself);
    ADE20K: ``ADEChallengeData2016`` (or ``root`` itself); imagefolder: ``root``.
    Raises DatasetError when the name is unknown or the files are not there.
    """
    name = _name(spec)
    if name == "synthetic":
        return ""
    given = _get(spec, "root")
    root = _root(spec, name)
    if name == "mnist":
        return _locate_mnist(root, given)
    if name in ("cifar10", "cifar100"):
        return _locate_cifar(root, given, name)
    if name == "ade20k":
        return _locate_ade20k(root, given)
    return root


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


def imagefolder_split_dir(root: str, train: bool) -> str:
    """The class-folder root of a split: ``root/train`` or ``root/val`` when present, else ``root``."""
    for split in (("train",) if train else ("val", "validation")):
        path = os.path.join(root, split)
        if os.path.isdir(path):
            return path
    return root


# ---------------------------------------------------------------------------- checking


def _head(path: str, size: int, where: str, fix: str) -> bytes:
    """The first ``size`` bytes of ``path`` (decompressed for .gz), or a DatasetError."""
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            return f.read(size)
    except (OSError, EOFError, zlib.error) as exc:
        raise DatasetError(f"{where}: cannot read {path} ({exc}); {fix}") from exc


def _check_idx(path: str, magic: int, dims: int, where: str) -> Tuple[int, ...]:
    """Check an idx file's magic number, header length and (uncompressed) size; return its shape."""
    fix = "re-download MNIST"
    size = 4 + 4 * dims
    head = _head(path, size, where, fix)
    if len(head) < size:
        raise DatasetError(f"{where}: {path} is truncated (header {len(head)} of {size} bytes); {fix}")
    found, *shape = struct.unpack(f">{1 + dims}I", head)
    if found != magic:
        raise DatasetError(f"{where}: {path} has magic number {found}, expected {magic}; {fix}")
    if not path.endswith(".gz"):  # a truncated download shows in the size; gz hides it until read
        expected = size + _product(shape)
        actual = os.path.getsize(path)
        if actual != expected:
            raise DatasetError(f"{where}: {path} holds {actual} bytes, its header promises {expected}; {fix}")
    return tuple(shape)


def _product(shape: List[int]) -> int:
    total = 1
    for n in shape:
        total *= n
    return total


def _check_mnist(folder: str, where: str) -> None:
    for train in (True, False):
        if not train and not _mnist_file(folder, "t10k-images-idx3-ubyte"):
            continue  # the test split is optional: only validation reads it
        images, labels = mnist_files(folder, train, where)
        n_images = _check_idx(images, MNIST_IMAGES_MAGIC, 3, where)[0]
        n_labels = _check_idx(labels, MNIST_LABELS_MAGIC, 1, where)[0]
        if n_images != n_labels:
            raise DatasetError(f"{where}: {os.path.basename(images)} holds {n_images} images but "
                              f"{os.path.basename(labels)} holds {n_labels} labels; re-download MNIST")


def _check_pickle(path: str, where: str, label: str) -> None:
    fix = f"re-download {label} (python version)"
    if not os.path.isfile(path):
        raise DatasetError(f"{where}: {path} missing; {fix}")
    head = _head(path, 2, where, fix)
    if not head:
        raise DatasetError(f"{where}: {path} is empty; {fix}")
    if head[:1] != b"\x80":  # PROTO opcode: the python-version batches are pickles (protocol 2)
        raise DatasetError(f"{where}: {path} is not a Python pickle (starts with {head!r}); {fix}")


def _check_cifar(folder: str, where: str, name: str) -> None:
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


def _files_with(folder: str, suffix: str) -> List[str]:
    with os.scandir(folder) as entries:
        return sorted(e.name[: -len(suffix)] for e in entries if e.name.endswith(suffix) and e.is_file())


def _check_ade20k(folder: str, where: str) -> None:
    fix = "re-extract ADEChallengeData2016.zip"
    for split in ("training", "validation"):
        images_dir = os.path.join(folder, "images", split)
        labels_dir = os.path.join(folder, "annotations", split)
        if split == "validation" and not os.path.isdir(images_dir):
            continue  # only validation reads it
        if not os.path.isdir(images_dir):
            raise DatasetError(f"{where}: {images_dir} missing; {fix}")
        stems = _files_with(images_dir, ".jpg")
        if not stems:
            raise DatasetError(f"{where}: no .jpg images in {images_dir}; {fix}")
        if not os.path.isdir(labels_dir):
            raise DatasetError(f"{where}: {labels_dir} missing (annotations of images/{split}); {fix}")
        n_labels = len(_files_with(labels_dir, ".png"))
        if n_labels != len(stems):
            raise DatasetError(f"{where}: images/{split} holds {len(stems)} .jpg but annotations/{split} "
                              f"holds {n_labels} .png; {fix}")
        step = max(1, len(stems) // _ADE_SAMPLE)
        for stem in stems[::step][:_ADE_SAMPLE] + stems[-1:]:
            if not os.path.isfile(os.path.join(labels_dir, stem + ".png")):
                raise DatasetError(f"{where}: annotations/{split}/{stem}.png missing for "
                                  f"images/{split}/{stem}.jpg; {fix}")
        first_image = os.path.join(images_dir, stems[0] + ".jpg")
        first_label = os.path.join(labels_dir, stems[0] + ".png")
        if _head(first_image, 3, where, fix) != _JPEG_MAGIC:
            raise DatasetError(f"{where}: {first_image} is not a JPEG file; {fix}")
        if _head(first_label, 8, where, fix) != _PNG_MAGIC:
            raise DatasetError(f"{where}: {first_label} is not a PNG file; {fix}")


def _check_imagefolder(root: str, where: str, num_classes: Optional[int]) -> None:
    folder = imagefolder_split_dir(root, train=True)
    with os.scandir(folder) as entries:
        classes = sorted(e.name for e in entries if e.is_dir() and not e.name.startswith("."))
    if not classes:
        raise DatasetError(f"{where}: no class folders in {folder}; lay the images out as "
                          f"<root>/[train/]<class>/<image> or use dataset=synthetic")
    for cls in classes:  # torchvision's ImageFolder refuses any class without an image
        with os.scandir(os.path.join(folder, cls)) as entries:
            if not any(e.name.lower().endswith(IMAGE_EXTENSIONS) for e in entries):
                raise DatasetError(f"{where}: class folder {os.path.join(folder, cls)} holds no image "
                                  f"({', '.join(IMAGE_EXTENSIONS)}); remove it or add its images")
    if num_classes is not None and num_classes < len(classes):
        raise DatasetError(f"{where}: dataset.num_classes={num_classes} but {folder} holds "
                          f"{len(classes)} class folders; set dataset.num_classes={len(classes)}")


def _check_fields(spec: Any, name: str) -> None:
    fraction = _get(spec, "fraction")
    if fraction is not None and not 0.0 < float(fraction) <= 1.0:
        raise DatasetError(f"dataset.fraction={fraction} is outside (0, 1]; pick the share of the "
                          f"training set each point uses, e.g. dataset.fraction=0.1")
    channels = _get(spec, "channels")
    allowed = CHANNELS.get(name)
    if allowed and channels is not None and int(channels) not in allowed:
        raise DatasetError(f"dataset.channels={channels} is not supported for dataset={name}; "
                          f"available: {', '.join(map(str, allowed))}")
    num_classes = _get(spec, "num_classes")
    needed = NUM_CLASSES.get(name)
    if needed and num_classes is not None and int(num_classes) < needed:
        raise DatasetError(f"dataset.num_classes={num_classes} but {name} has {needed} classes; "
                          f"set dataset.num_classes={needed}")


def check_dataset(spec: Any) -> None:
    """Refuse, with one actionable DatasetError line, a dataset a job could not read.

    ``spec`` is a DatasetSpec, its DictConfig or a plain dict. Only headers and folder
    listings are read, so this is fast even on a parallel file system.
    """
    name = _name(spec)
    if name == "synthetic":
        return
    _check_fields(spec, name)
    folder = resolve_root(spec)
    where = f"dataset.root={_get(spec, 'root')}"
    if name == "mnist":
        _check_mnist(folder, where)
    elif name in ("cifar10", "cifar100"):
        _check_cifar(folder, where, name)
    elif name == "ade20k":
        _check_ade20k(folder, where)
    else:
        num_classes = _get(spec, "num_classes")
        _check_imagefolder(folder, where, None if num_classes is None else int(num_classes))
