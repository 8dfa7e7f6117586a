"""dataset=imagefolder: ImageNet-style class folders, ``<root>/[train|val]/<class>/<image>``."""

from __future__ import annotations

import os
from typing import Any

from campaign_datasets.registry import DatasetDef, DatasetError, value

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def imagefolder_split_dir(root: str, train: bool) -> str:
    """The class-folder root of a split: ``root/train`` or ``root/val`` when present, else ``root``."""
    for split in (("train",) if train else ("val", "validation")):
        path = os.path.join(root, split)
        if os.path.isdir(path):
            return path
    return root


def check(root: str, where: str, spec: Any) -> None:
    """Class folders, each with an image; no more of them than ``dataset.num_classes``."""
    num_classes = value(spec, "num_classes")
    num_classes = None if num_classes is None else int(num_classes)
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


DATASETS = (DatasetDef("imagefolder", check=check, channels=(1, 3), loader="trainers.data.imagefolder:load"),)
