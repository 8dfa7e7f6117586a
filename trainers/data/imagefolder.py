"""ImageNet-style class folders (``root/[train|val]/<class>/<image>``) through torchvision."""

from __future__ import annotations

from typing import Any, Tuple

import torch
from torch.utils.data import Dataset

from campaign_datasets import imagefolder_split_dir, resolve_root
from trainers.data import share_indices, spec_value

IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


class ImageFolder(Dataset):
    """``(image, label)`` from torchvision's ImageFolder with the standard ImageNet pipeline:
    random resized crop + flip for training, resize + centre crop for validation."""

    def __init__(self, root: str, *, train: bool = True, image_size: int = 224, channels: int = 3,
                 fraction: float = 1.0, seed: int = 0):
        from torchvision import datasets, transforms as T

        if channels not in (1, 3):
            raise ValueError(f"ImageFolder feeds 1 or 3 channels, not {channels}")
        folder = imagefolder_split_dir(resolve_root({"name": "imagefolder", "root": root}), train)
        if train:
            steps = [T.RandomResizedCrop(image_size), T.RandomHorizontalFlip()]
        else:
            steps = [T.Resize(int(round(image_size * 256 / 224))), T.CenterCrop(image_size)]
        mean, std = IMAGENET_MEAN, IMAGENET_STD
        if channels == 1:
            steps.append(T.Grayscale(1))
            mean, std = (sum(mean) / 3,), (sum(std) / 3,)
        steps += [T.ToTensor(), T.Normalize(mean, std)]
        self.inner = datasets.ImageFolder(folder, transform=T.Compose(steps))
        if train and fraction < 1.0:
            keep = share_indices(len(self.inner.samples), fraction, seed)
            self.inner.samples = [self.inner.samples[i] for i in keep]
            self.inner.imgs = self.inner.samples
            self.inner.targets = [target for _, target in self.inner.samples]
        self.classes = self.inner.classes
        self.num_classes = len(self.classes)

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, index: int) -> Tuple[torch.Tensor, int]:
        return self.inner[index]


def load(spec: Any, *, train: bool, image_size: int, channels: int, fraction: float, seed: int) -> ImageFolder:
    """dataset=imagefolder's loader (campaign_datasets/imagefolder.py names it)."""
    return ImageFolder(spec_value(spec, "root"), train=train, image_size=image_size, channels=channels,
                       fraction=fraction, seed=seed)
