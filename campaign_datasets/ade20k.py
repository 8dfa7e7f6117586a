"""dataset=ade20k: ADEChallengeData2016 (images/ + annotations/), read by MMSegmentation's pipeline."""

from __future__ import annotations

import os
from typing import Any

from campaign_datasets.files import files_with, head
from campaign_datasets.registry import DatasetDef, DatasetError

_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
_JPEG_MAGIC = b"\xff\xd8\xff"
_ADE_SAMPLE = 8  # image/annotation pairs whose stems are checked


def locate(root: str, given: str) -> str:
    """The ``ADEChallengeData2016`` folder (or ``root`` itself when it is that folder)."""
    for candidate in (os.path.join(root, "ADEChallengeData2016"), root):
        if os.path.isdir(os.path.join(candidate, "images")):
            return candidate
    if os.path.isfile(os.path.join(root, "ADEChallengeData2016.zip")):
        raise DatasetError(f"dataset.root={given}: ADEChallengeData2016.zip is not extracted; "
                           f"run `unzip ADEChallengeData2016.zip` in {root}")
    raise DatasetError(f"dataset.root={given}: no ADE20K files (ADEChallengeData2016/images) found; "
                       f"download ADEChallengeData2016.zip there or use dataset=synthetic")


def check(folder: str, where: str, spec: Any = None) -> None:
    """Each split's images have their annotations (a sample of stems), JPEG and PNG headers."""
    fix = "re-extract ADEChallengeData2016.zip"
    for split in ("training", "validation"):
        images_dir = os.path.join(folder, "images", split)
        labels_dir = os.path.join(folder, "annotations", split)
        if split == "validation" and not os.path.isdir(images_dir):
            continue  # only validation reads it
        if not os.path.isdir(images_dir):
            raise DatasetError(f"{where}: {images_dir} missing; {fix}")
        stems = files_with(images_dir, ".jpg")
        if not stems:
            raise DatasetError(f"{where}: no .jpg images in {images_dir}; {fix}")
        if not os.path.isdir(labels_dir):
            raise DatasetError(f"{where}: {labels_dir} missing (annotations of images/{split}); {fix}")
        n_labels = len(files_with(labels_dir, ".png"))
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
        if head(first_image, 3, where, fix) != _JPEG_MAGIC:
            raise DatasetError(f"{where}: {first_image} is not a JPEG file; {fix}")
        if head(first_label, 8, where, fix) != _PNG_MAGIC:
            raise DatasetError(f"{where}: {first_label} is not a PNG file; {fix}")


# trainers/mmseg/data.py builds it with mmseg's ADE20KDataset, not trainers.data.
DATASETS = (DatasetDef("ade20k", locate=locate, check=check,
                       read_by="MMSegmentation's pipeline (the mmseg trainer)"),)
