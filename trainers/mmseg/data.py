"""Training data of the reference workload, as MMEngine dataloader configs.

``dataset.name=ade20k``: mmseg's ADE20KDataset with the standard ADE20K training
pipeline (mmseg ``configs/_base_/datasets/ade20k.py``), crop = ``dataset.image_size``.
``dataset.name=synthetic``: the same packed shapes and label range (classes
0..num_classes-1 plus 255 ignore) from a small seeded pool, with no I/O and no
augmentation, so a run measures the model and the collectives, not the loader.
Both come through MMEngine's InfiniteSampler, sharded over the ranks by the Runner.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
from torch.utils.data import DataLoader, Dataset

from campaign_datasets import resolve_root
from trainers.data import DEFAULT_SYNTHETIC_LENGTH, share_indices

NAMES = ("ade20k", "synthetic")
IGNORE_INDEX = 255  # mmseg's ignore label: ADE20K's class 0 ("other") after reduce_zero_label
POOL = 8  # distinct synthetic samples per rank (generated once, before timing)


def train_pipeline(crop: int) -> list[dict]:
    """mmseg's ADE20K training pipeline for a ``crop`` x ``crop`` crop.

    The resize scale is (4 x crop, crop) as in mmseg's configs: (2048, 512) at the
    reference crop of 512, (2560, 640) at 640.
    """
    return [
        dict(type="LoadImageFromFile"),
        dict(type="LoadAnnotations", reduce_zero_label=True),
        dict(type="RandomResize", scale=(4 * crop, crop), ratio_range=(0.5, 2.0), keep_ratio=True),
        dict(type="RandomCrop", crop_size=(crop, crop), cat_max_ratio=0.75),
        dict(type="RandomFlip", prob=0.5),
        dict(type="PhotoMetricDistortion"),
        dict(type="PackSegInputs"),
    ]


def ade20k_dataset(spec: dict, seed: int):
    """ADE20KDataset over ``images/training`` + ``annotations/training`` of the resolved root."""
    from mmseg.registry import DATASETS

    crop = int(spec["image_size"])
    dataset = DATASETS.build(dict(
        type="ADE20KDataset", data_root=resolve_root(spec),
        data_prefix=dict(img_path="images/training", seg_map_path="annotations/training"),
        pipeline=train_pipeline(crop)))
    fraction = spec.get("fraction")
    if fraction is not None and float(fraction) < 1.0:
        dataset = dataset.get_subset(share_indices(len(dataset), float(fraction), seed))
    return dataset


class SyntheticSegmentation(Dataset):
    """Packed ADE20K-like samples (``inputs`` uint8 3xHxW, ``data_samples`` with gt_sem_seg).

    Labels are blocks of random classes with a strip of ignore (255), so a model can fit
    a batch; each rank draws its own pool (``seed`` differs per rank).
    """

    def __init__(self, *, image_size: int, num_classes: int, channels: int = 3, length: int, seed: int):
        from mmseg.datasets.ade import ADE20KDataset

        rng = np.random.RandomState(seed)
        size, block = image_size, max(1, image_size // 8)
        self.length = int(length)
        self.pool = []
        for _ in range(POOL):
            img = rng.randint(0, 256, size=(size, size, channels)).astype(np.uint8)
            cells = rng.randint(0, num_classes, size=(-(-size // block),) * 2)
            seg = np.kron(cells, np.ones((block, block), dtype=np.int64))[:size, :size].astype(np.uint8)
            seg[: max(1, size // 16)] = IGNORE_INDEX
            self.pool.append((img, seg))
        classes = ADE20KDataset.METAINFO["classes"]
        if num_classes > len(classes):
            classes = tuple(f"class_{i}" for i in range(num_classes))
        names = classes[:num_classes]
        self.metainfo = dict(classes=names, reduce_zero_label=True)
        self._pack = None

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, idx: int) -> dict[str, Any]:
        if self._pack is None:  # built lazily: picklable into DataLoader workers
            from mmseg.datasets.transforms import PackSegInputs

            self._pack = PackSegInputs()
        img, seg = self.pool[idx % len(self.pool)]
        h, w = seg.shape
        # A fresh dict per item: the data preprocessor updates the packed samples in place.
        return self._pack(dict(img=img, gt_seg_map=seg, img_shape=(h, w), ori_shape=(h, w),
                               pad_shape=(h, w), scale_factor=(1.0, 1.0), flip=False,
                               flip_direction=None, reduce_zero_label=True))


def build_dataset(spec: dict, *, seed: int, rank: int):
    """The training dataset of the job's ``dataset`` section (``seed``: the campaign seed)."""
    name = spec.get("name") or "synthetic"
    if name == "ade20k":
        return ade20k_dataset(spec, seed)
    if name == "synthetic":
        fraction = float(spec.get("fraction") or 1.0)
        length = int(spec.get("length") or DEFAULT_SYNTHETIC_LENGTH)
        return SyntheticSegmentation(image_size=int(spec["image_size"]), num_classes=int(spec["num_classes"]),
                                     channels=int(spec.get("channels") or 3),
                                     length=max(1, int(round(length * fraction))), seed=seed * 1000 + rank)
    raise ValueError(f"dataset={name} is not supported by swinv2_upernet; available: {', '.join(NAMES)}")


def dataloader_config(spec: dict, *, batch_size: int, seed: int, rank: int, premade: bool = True) -> dict:
    """The Runner's ``train_dataloader``: this rank's shard through an InfiniteSampler.
    Synthetic data gets no worker processes where the trainer takes a few batches from
    it once and reuses them on the device (``premade``: the lean loop,
    trainers/mmseg/speed.py); the stock loop reads every batch through the loader, with
    ``dataset.num_workers`` workers as for a dataset."""
    synthetic = (spec.get("name") or "synthetic") == "synthetic"
    workers = 0 if synthetic and premade else int(spec.get("num_workers") or 0)
    return dict(
        batch_size=int(batch_size),
        num_workers=workers,
        persistent_workers=workers > 0,
        sampler=dict(type="InfiniteSampler", shuffle=True),
        dataset=build_dataset(spec, seed=seed, rank=rank),
    )


def continued_loader(loader: DataLoader, skip: int) -> DataLoader:
    """A DataLoader like ``loader`` (the Runner's, over an InfiniteSampler) whose sampler
    starts ``skip`` indices into this rank's sequence: a resumed run reads the images
    an uninterrupted one would next, without loading those it skips (MMEngine's own
    resume iterates the loader that many batches: hours of decoding at 80K iterations).
    """
    from mmengine.dataset import InfiniteSampler

    old = loader.sampler
    if not isinstance(old, InfiniteSampler):
        raise TypeError(f"cannot continue a {type(old).__name__}: the trainer's loader uses InfiniteSampler")
    sampler = InfiniteSampler(old.dataset, shuffle=old.shuffle, seed=old.seed)  # the same sequence, from its start
    sampler.indices = itertools.islice(sampler.indices, int(skip), None)
    workers = int(loader.num_workers)
    return DataLoader(loader.dataset, batch_size=loader.batch_size, sampler=sampler, num_workers=workers,
                      collate_fn=loader.collate_fn, pin_memory=loader.pin_memory, drop_last=loader.drop_last,
                      timeout=loader.timeout, worker_init_fn=loader.worker_init_fn, generator=loader.generator,
                      persistent_workers=loader.persistent_workers,
                      **({"prefetch_factor": loader.prefetch_factor} if workers > 0 else {}))
