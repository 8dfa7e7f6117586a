"""Frozen torchvision backbones under a trained classifier (the frozen-backbone study).

The backbone is a torchvision ImageNet model without its head: frozen (no gradient,
always in eval mode, so BatchNorm uses its running statistics), optionally loaded
from a local state-dict file (never downloaded here: a torchvision weights name is
fetched by the launch, campaign/launch/weights.py, and its file handed to the job).
The head is trained:

- ``mlp``: Linear(features, H) + ReLU + Dropout, Linear(H, H) + ReLU + Dropout, Linear(H, classes)
- ``linear``: Linear(features, classes)

``features`` is what the backbone hands its own ImageNet head (read from torchvision's
architecture, see ``_strip_head``): 512 (resnet18, squeezenet1_0), 1024 (densenet121),
9216 (alexnet), 25088 (vgg16).
"""

from __future__ import annotations

import re
from typing import Callable, Optional

import torch
from torch import nn

from trainers.state_file import load_state

BACKBONES = ("alexnet", "densenet121", "resnet18", "squeezenet1_0", "vgg16")
CLASSIFIERS = ("mlp", "linear")
INPUT_SIZE = 224  # the side of the images these ImageNet backbones were trained on
# State-dict prefixes of each backbone's ImageNet head (absent from the features).
HEAD_PREFIX = {"alexnet": "classifier.", "densenet121": "classifier.", "resnet18": "fc.",
               "squeezenet1_0": "classifier.", "vgg16": "classifier."}


# densenet121-a639ec97.pth names "...denselayer1.norm.1.weight" what the model calls "...norm1.weight"
DENSENET_OLD_KEY = re.compile(
    r"^(.*denselayer\d+\.(?:norm|relu|conv))\.((?:[12])\.(?:weight|bias|running_mean|running_var))$")


def _builder(name: str) -> Callable[[], nn.Module]:
    import torchvision

    if name not in BACKBONES:
        raise ValueError(f"unknown backbone {name!r}; available: {', '.join(BACKBONES)}")
    return getattr(torchvision.models, name)


def _strip_head(name: str, model: nn.Module) -> tuple[nn.Module, int]:
    """(``model`` mapping images to ``features``-long vectors, ``features``)."""
    if name == "resnet18":
        features = model.fc.in_features
        model.fc = nn.Identity()
    elif name == "alexnet":  # classifier: Dropout, Linear(256*6*6, 4096), ...
        features = model.classifier[1].in_features
        model.classifier = nn.Identity()
    elif name == "vgg16":  # classifier: Linear(512*7*7, 4096), ...
        features = model.classifier[0].in_features
        model.classifier = nn.Identity()
    elif name == "densenet121":  # forward pools to 1x1 and flattens before its classifier
        features = model.classifier.in_features
        model.classifier = nn.Identity()
    else:  # squeezenet1_0: the head is Dropout, Conv1x1(512 -> 1000), ReLU, global average pool
        features = model.classifier[1].in_channels
        model.classifier = nn.AdaptiveAvgPool2d(1)  # forward flattens after it: 512 pooled channels
    return model, int(features)


def head_params(features: int, hidden: int, num_classes: int, classifier: str = "mlp") -> int:
    """Trainable parameters of the head, from its shape (weights + biases)."""
    if classifier == "linear":
        return features * num_classes + num_classes
    return (features * hidden + hidden) + (hidden * hidden + hidden) + (hidden * num_classes + num_classes)


def make_head(features: int, hidden: int, num_classes: int, classifier: str = "mlp", dropout: float = 0.5) -> nn.Module:
    if classifier not in CLASSIFIERS:
        raise ValueError(f"unknown classifier {classifier!r}; available: {', '.join(CLASSIFIERS)}")
    if classifier == "linear":
        return nn.Linear(features, num_classes)
    if hidden < 1:
        raise ValueError(f"hidden={hidden} must be at least 1")
    return nn.Sequential(
        nn.Linear(features, hidden), nn.ReLU(inplace=True), nn.Dropout(dropout),
        nn.Linear(hidden, hidden), nn.ReLU(inplace=True), nn.Dropout(dropout),
        nn.Linear(hidden, num_classes),
    )


def load_weights(name: str, model: nn.Module, path: str, sha256: Optional[str] = None) -> None:
    """Load a local torchvision state dict (e.g. ``vgg16-397923af.pth``) into the full model,
    read through the door and checked against ``sha256`` (trainers/state_file.py).

    Strict but for the ImageNet head, which the frozen backbone drops: its keys may be
    missing; any other missing or unexpected key, or a shape that differs, means the
    file is not this backbone's, and is refused.
    """
    state = load_state(path, sha256)
    for key in ("state_dict", "model"):
        if isinstance(state, dict) and isinstance(state.get(key), dict):
            state = state[key]
    if name == "densenet121":  # torchvision's own file keeps its old key names (torchvision's densenet loader)
        state = {DENSENET_OLD_KEY.sub(r"\1\2", k): v for k, v in state.items()}
    try:
        missing, unexpected = model.load_state_dict(state, strict=False)
    except RuntimeError as exc:  # shapes that do not match
        raise ValueError(f"{path}: not {name} weights ({str(exc).strip().splitlines()[-1].strip()})") from exc
    bad = [k for k in list(missing) + list(unexpected) if not k.startswith(HEAD_PREFIX[name])]
    if bad:
        raise ValueError(f"{path}: not {name} weights ({len(bad)} keys do not match, e.g. {bad[0]!r})")


class FrozenBackboneClassifier(nn.Module):
    """A frozen backbone feeding a trained head; ``train()`` never unfreezes the backbone."""

    def __init__(self, backbone: nn.Module, head: nn.Module, features: int):
        super().__init__()
        self.backbone = backbone.requires_grad_(False).eval()
        self.head = head
        self.features = features

    def train(self, mode: bool = True) -> "FrozenBackboneClassifier":
        super().train(mode)
        self.backbone.eval()  # frozen: running statistics, no dropout
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():  # nothing to differentiate below the head
            f = self.backbone(x)
        return self.head(f.flatten(1))


def build_classifier(backbone: str, *, hidden: int = 4096, classifier: str = "mlp", num_classes: int = 10,
                     dropout: float = 0.5, weights: Optional[str] = None,
                     weights_sha256: Optional[str] = None) -> FrozenBackboneClassifier:
    """The frozen ``backbone`` under a fresh head, on the current default device.

    Build under ``torch.device("meta")`` to count parameters without allocating them.
    """
    model = _builder(backbone)()
    if weights:
        load_weights(backbone, model, weights, weights_sha256)
    features_model, features = _strip_head(backbone, model)
    return FrozenBackboneClassifier(features_model, make_head(features, hidden, num_classes, classifier, dropout), features)


def trainable_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
