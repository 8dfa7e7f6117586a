"""The dataset registry: a ``dataset`` config section -> its declaration (``DatasetDef``).

One registry for the launch and the job. A declaration is torch-free: what the host
validates (the folder it locates under ``dataset.root``, the checks of its files, the
channels its loader feeds, the classes its labels span) and the ``loader`` the job
builds its torch Dataset with, named as ``"module:function"`` so the host never
imports it. The built-ins are declared one module per dataset in this package and
registered by ``campaign_datasets/__init__.py``; ``register`` adds one more (a site's
dataset, a test's toy), with its conf file (or ConfigStore node) in the ``dataset``
group on the Hydra side.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

DEFAULT = "synthetic"  # the dataset of a section that names none


class DatasetError(ValueError):
    """A dataset the job could not read: its name, folder or files (one actionable line)."""


@dataclass(frozen=True)
class DatasetDef:
    """What the launch validates a dataset by and what the job loads it with."""

    name: str  # dataset.name, as its conf file (conf/dataset/<name>.yaml) sets it
    needs_root: bool = True  # False: generated on each rank (no folder, nothing to check)
    locate: Optional[Callable[[str, str], str]] = None  # (absolute root, root as given) -> folder read; None: root
    check: Optional[Callable[[str, str, Any], None]] = None  # (folder, "dataset.root=...", section): headers only
    channels: Tuple[int, ...] = ()  # image channels its loader can feed; (): any
    num_classes: Optional[int] = None  # classes its labels span: dataset.num_classes may not be smaller
    # The job's loader, called as loader(section, train=, image_size=, channels=, fraction=, seed=)
    # and returning a torch Dataset of (image, label); "module:function" (imported only in the
    # job) or the function itself (a dataset registered in-process). None: trainers.data does
    # not read it (read_by does).
    loader: Union[str, Callable[..., Any], None] = None
    read_by: str = "trainers.data"  # who reads it when loader is None (the job's refusal names it)
    # Images of its whole training and test splits (experiment.epochs sizes an epoch from the
    # first; an evaluation row's images is the second); None: unknown before the files are read.
    train_images: Optional[int] = None
    test_images: Optional[int] = None
    # A generated dataset's split sizes from its section instead: fn(section, train) -> images.
    sizes: Optional[Callable[[Any, bool], int]] = None
    # The test split's files, checked only where a point reads it (experiment.validation=true):
    # fn(folder, "dataset.root=...") raises DatasetError; None: nothing to check (or no split).
    check_test: Optional[Callable[[str, str], None]] = None


_REGISTRY: Dict[str, DatasetDef] = {}


def register(*datasets: DatasetDef) -> None:
    """Add declarations; a name already registered is refused (unregister it first)."""
    for dataset in datasets:
        if not isinstance(dataset, DatasetDef):
            raise TypeError(f"register() takes DatasetDef declarations, not {type(dataset).__name__}")
        if dataset.name in _REGISTRY:
            raise ValueError(f"dataset {dataset.name!r} is already registered")
        _REGISTRY[dataset.name] = dataset


def unregister(name: str) -> None:
    """Remove a declaration (a test puts the registry back as it found it)."""
    _REGISTRY.pop(name, None)


def names() -> List[str]:
    """The registered datasets' names, sorted (what an unknown name's refusal lists)."""
    return sorted(_REGISTRY)


def find(name: str) -> Optional[DatasetDef]:
    """The declaration of ``name``, None when none is registered."""
    return _REGISTRY.get(name)


def value(spec: Any, key: str, default: Any = None) -> Any:
    """A field of a DatasetSpec, a DictConfig or a plain dict (the job's config section)."""
    if isinstance(spec, Mapping):
        return spec.get(key, default)
    return getattr(spec, key, default)


def dataset_of(spec: Any) -> DatasetDef:
    """The declaration a ``dataset`` section names (DEFAULT when it names none)."""
    name = value(spec, "name") or DEFAULT
    found = _REGISTRY.get(name)
    if found is None:
        raise DatasetError(f"unknown dataset {name!r}; available: {', '.join(names())}")
    return found


def split_images(spec: Any, train: bool) -> Optional[int]:
    """Images of the whole training (``train``) or test split of ``spec``'s dataset, before
    any ``dataset.fraction``; None when its declaration does not know (an imagefolder)."""
    dataset = dataset_of(spec)
    if dataset.sizes is not None:
        return int(dataset.sizes(spec, train))
    return dataset.train_images if train else dataset.test_images


def _root(spec: Any, name: str) -> str:
    root = value(spec, "root")
    if not root:
        raise DatasetError(f"dataset.root is required for dataset={name}")
    path = os.path.abspath(os.path.expanduser(str(root)))
    if not os.path.isdir(path):
        raise DatasetError(f"dataset.root={root}: no such directory; point dataset.root at the "
                           f"folder holding {name} or use dataset=synthetic")
    return path


def resolve_root(spec: Any) -> str:
    """The absolute folder a job reads ``spec``'s dataset from ("" for a generated one).

    The declaration's ``locate`` picks it below ``dataset.root`` (MNIST: the folder of
    its idx files; CIFAR: ``cifar-10-batches-py`` / ``cifar-100-python``; ADE20K:
    ``ADEChallengeData2016``; imagefolder: ``root`` itself). Raises DatasetError when the
    name is unknown or the files are not there.
    """
    dataset = dataset_of(spec)
    if not dataset.needs_root:
        return ""
    root = _root(spec, dataset.name)
    return dataset.locate(root, value(spec, "root")) if dataset.locate else root


def _check_fields(spec: Any, dataset: DatasetDef) -> None:
    fraction = value(spec, "fraction")
    if fraction is not None and not 0.0 < float(fraction) <= 1.0:
        raise DatasetError(f"dataset.fraction={fraction} is outside (0, 1]; pick the share of the "
                           f"training set each point uses, e.g. dataset.fraction=0.1")
    channels = value(spec, "channels")
    if dataset.channels and channels is not None and int(channels) not in dataset.channels:
        raise DatasetError(f"dataset.channels={channels} is not supported for dataset={dataset.name}; "
                           f"available: {', '.join(map(str, dataset.channels))}")
    num_classes = value(spec, "num_classes")
    needed = dataset.num_classes
    if needed and num_classes is not None and int(num_classes) < needed:
        raise DatasetError(f"dataset.num_classes={num_classes} but {dataset.name} has {needed} classes; "
                           f"set dataset.num_classes={needed}")


def check_dataset(spec: Any, test_split: bool = False) -> None:
    """Refuse, with one actionable DatasetError line, a dataset a job could not read.

    ``spec`` is a DatasetSpec, its DictConfig or a plain dict; ``test_split``: the job
    also reads the test split (``experiment.validation=true``), so its files must be
    there too. Only headers and folder listings are read, so this is fast even on a
    parallel file system.
    """
    dataset = dataset_of(spec)
    if not dataset.needs_root:
        return
    _check_fields(spec, dataset)
    folder = resolve_root(spec)
    where = f"dataset.root={value(spec, 'root')}"
    if dataset.check is not None:
        dataset.check(folder, where, spec)
    if test_split and dataset.check_test is not None:
        dataset.check_test(folder, where)
