"""Job-side datasets and loaders: what a trainer iterates over.

``build_dataset`` turns the job's ``dataset`` config section into a torch Dataset whose
items are ``(image, label)``: a float32 ``channels x image_size x image_size`` tensor,
normalised, and an int class. ``build_loader`` shards it over the DDP ranks.

Which loader builds a dataset is its declaration's (``campaign_datasets``, stdlib only,
also read on the host before submission): one module here per dataset read from disk,
each with a ``load`` function its declaration names. Where the files are is decided
there too (``resolve_root``), so the host check and the job read the same folder.
ADE20K is not here: MMSegmentation's pipeline loads it.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, List, Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, DistributedSampler

import campaign_datasets
from campaign_datasets.registry import value as _section_value

from campaign_datasets.synthetic import DEFAULT_LENGTH as DEFAULT_SYNTHETIC_LENGTH  # noqa: F401  (re-exported)


def share_indices(n: int, fraction: float, seed: int) -> List[int]:
    """A deterministic, sorted share of ``range(n)``: ``round(n * fraction)`` indices (at least 1).

    The share is a prefix of one seeded permutation, so shares of one seed are nested
    (the 10 % share lies inside the 20 % share): weak scaling by dataset share grows
    the data a point sees without swapping it for other samples.
    """
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction={fraction} is outside (0, 1]")
    if fraction == 1.0:
        return list(range(n))
    k = max(1, int(round(n * fraction)))
    # numpy's legacy RandomState is guaranteed stable across versions: same seed, same share.
    order = np.random.RandomState(seed).permutation(n)[:k]
    return sorted(int(i) for i in order)


def dataset_fraction(cfg: dict, gpus: int) -> Optional[float]:
    """The training-set share of a point on ``gpus`` GPUs: ``experiment.dataset_fraction_per_gpu``
    x gpus (capped at 1) when set, else ``dataset.fraction`` (None: the whole set). The
    launch sizes ``experiment.epochs`` from the same share (campaign/launch/plan.py
    ``training_images``), so every trainer that loads a training set applies it."""
    per_gpu = (cfg.get("experiment") or {}).get("dataset_fraction_per_gpu")
    if per_gpu is None:
        return cfg["dataset"].get("fraction")
    return min(1.0, float(per_gpu) * gpus)


def to_model_input(image: torch.Tensor, mean: Sequence[float], std: Sequence[float],
                   image_size: int, channels: int) -> torch.Tensor:
    """uint8 ``C x H x W`` -> normalised float32 ``channels x image_size x image_size``.

    A grey image is repeated to 3 channels (ImageNet backbones); resizing is bilinear,
    antialiased when it shrinks.
    """
    x = image.to(torch.float32).div_(255.0)
    mean_t = torch.tensor(mean, dtype=torch.float32).view(-1, 1, 1)
    std_t = torch.tensor(std, dtype=torch.float32).view(-1, 1, 1)
    x = (x - mean_t) / std_t
    height, width = x.shape[-2:]
    if (height, width) != (image_size, image_size):
        shrink = image_size < min(height, width)
        x = F.interpolate(x[None], size=(image_size, image_size), mode="bilinear",
                          align_corners=False, antialias=shrink)[0]
    if x.shape[0] != channels:
        if x.shape[0] != 1:
            raise ValueError(f"cannot turn a {x.shape[0]}-channel image into {channels} channels")
        x = x.expand(channels, -1, -1).contiguous()
    return x


def spec_value(spec: Any, key: str, default: Any = None) -> Any:
    """A field of the ``dataset`` section (DatasetSpec, DictConfig or dict), ``default`` when unset or None."""
    value = _section_value(spec, key, default)
    return default if value is None else value


def loader_of(name: str) -> Callable[..., Dataset]:
    """The loader a dataset's declaration names (importing it, and with it torch's side).

    Raises ValueError naming the datasets this package reads when ``name`` is not
    registered, or who reads it when trainers.data does not (ADE20K).
    """
    dataset = campaign_datasets.find(name)
    if dataset is None:
        readable = [n for n in campaign_datasets.names() if campaign_datasets.find(n).loader is not None]
        raise ValueError(f"unknown dataset {name!r}; available: {', '.join(readable)}")
    if dataset.loader is None:
        raise ValueError(f"dataset={name} is read by {dataset.read_by}, not by trainers.data")
    if callable(dataset.loader):
        return dataset.loader
    module, _, attr = dataset.loader.partition(":")
    return getattr(importlib.import_module(module), attr)


def build_dataset(spec: Any, *, train: bool, image_size: int, channels: int, seed: int = 0) -> Dataset:
    """The torch Dataset of the job's ``dataset`` section (DatasetSpec keys as a plain dict).

    ``image_size`` and ``channels`` are the model's input; ``dataset.fraction`` (0, 1]
    keeps a share of the training set chosen by ``seed`` (use the campaign seed: every
    rank must pick the same share); ``dataset.length`` sizes dataset=synthetic. The
    dataset's loader (``loader_of``) is called with these and the section itself.
    """
    name = spec_value(spec, "name", campaign_datasets.DEFAULT)
    fraction = float(spec_value(spec, "fraction", 1.0)) if train else 1.0
    load = loader_of(name)
    return load(spec, train=train, image_size=image_size, channels=channels, fraction=fraction, seed=seed)


def build_loader(dataset: Dataset, *, batch_size: int, rank: int, world_size: int, seed: int,
                 num_workers: int, drop_last: bool = True, pin_memory: Optional[bool] = None) -> DataLoader:
    """A DataLoader of this rank's shard, reshuffled per epoch by ``loader.sampler.set_epoch``.

    Every world size gets a DistributedSampler (one replica when ``world_size`` is 1), so
    the shuffle depends only on ``seed`` and the epoch, and ``set_epoch`` always exists.
    Worker processes persist across epochs; memory is pinned by default on CUDA hosts.
    """
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank={rank} is outside a world of {world_size}")
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size} must be at least 1")
    per_rank = len(dataset) // world_size if drop_last else -(-len(dataset) // world_size)
    if drop_last and per_rank < batch_size:
        raise ValueError(f"dataset of {len(dataset)} samples gives no full batch of {batch_size} on each "
                         f"of {world_size} ranks; lower the batch or raise dataset.length/dataset.fraction")
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True,
                                 seed=seed, drop_last=drop_last)
    generator = torch.Generator()
    generator.manual_seed(seed * 1_000 + rank)  # seeds the workers' RNGs, distinct per rank
    return DataLoader(
        dataset,
        batch_size=batch_size,
        sampler=sampler,
        num_workers=num_workers,
        drop_last=drop_last,
        pin_memory=torch.cuda.is_available() if pin_memory is None else pin_memory,
        persistent_workers=num_workers > 0,
        generator=generator,
    )


class EpochBatches:
    """Endless batches of a loader built by ``build_loader``: when an epoch ends the
    next one starts, with ``sampler.set_epoch`` so each epoch is shuffled anew.

    ``epoch`` is the epoch the last batch came from; ``ended`` the last epoch whose final
    batch has been handed out (-1 before), known as soon as it is, not one fetch later:
    an evaluation pass (trainers/evaluate.py) runs right after the epoch's last iteration."""

    def __init__(self, loader: DataLoader):
        self.loader = loader
        self.epoch = 0
        self.ended = -1
        self._taken = 0  # batches of this epoch handed out
        self._it = iter(loader)

    def next(self):
        try:
            batch = next(self._it)
        except StopIteration:
            self.epoch += 1
            self._taken = 0
            self.loader.sampler.set_epoch(self.epoch)
            self._it = iter(self.loader)
            batch = next(self._it)
        self._taken += 1
        if self._taken == len(self.loader):
            self.ended = self.epoch
        return batch
