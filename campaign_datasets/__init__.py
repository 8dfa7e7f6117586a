"""The datasets' declarations, on-disk layouts and checks, shared by the launch and the jobs.

A neutral package (like ``campaign_sql`` and ``campaign_trace``): the standard library
only (no torch, numpy or PIL), importing nothing of ``campaign`` or ``trainers``, so both
sides use it and neither depends on the other. The launch (``campaign.catalogue.datasets``) runs
``check_dataset`` on the login node before anything is submitted; it reads headers,
never whole files, so a wrong ``dataset.root`` costs one line at launch instead of a
queue wait and a failed job per sweep point. The job side (``trainers.data``) finds a
dataset's loader in its declaration and calls ``resolve_root``, ``mnist_files`` and
``imagefolder_split_dir``, so both sides agree on which folder and which files are used.

One module per dataset declares it (``DATASETS = (DatasetDef(...),)``, ``registry.py``)
and is registered below; a dataset of one's own is one ``register(DatasetDef(...))``
plus its conf file in ``conf/dataset/``. Every refusal is a ``DatasetError`` with one
actionable line; the launch reports it as a configuration error, a job as its failure.
"""

from __future__ import annotations

from campaign_datasets import ade20k, cifar, imagefolder, mnist, synthetic
from campaign_datasets.cifar import CIFAR10_TRAIN
from campaign_datasets.imagefolder import IMAGE_EXTENSIONS, imagefolder_split_dir
from campaign_datasets.mnist import MNIST_IMAGES_MAGIC, MNIST_LABELS_MAGIC, mnist_files
from campaign_datasets.registry import (DEFAULT, DatasetDef, DatasetError, check_dataset, dataset_of, find, names,
                                        register, resolve_root, split_images, unregister)

# The built-ins: a new one is a module of this package and its entry here.
for _module in (ade20k, cifar, imagefolder, mnist, synthetic):
    register(*_module.DATASETS)
del _module

__all__ = ["CIFAR10_TRAIN", "DEFAULT", "DatasetDef", "DatasetError", "IMAGE_EXTENSIONS", "MNIST_IMAGES_MAGIC",
           "MNIST_LABELS_MAGIC", "check_dataset", "dataset_of", "find", "imagefolder_split_dir", "mnist_files",
           "names", "register", "resolve_root", "split_images", "unregister"]
