"""torchvision's pretrained weights of the frozen-backbone study's backbones, by the names
torchvision's public API gives them, torch-free: ``trainer.params.weights`` names one,
the launch (no torch: campaign/launch/weights.py) fetches its file once, and the job
loads that file (trainers/models/classifier.py).

Why a static table rather than asking torchvision: the host side never imports torch,
and asking the job's Python (``torchvision.models.get_weight(name).url`` in a
subprocess) would cost a torch import per launch and cannot reach a container's Python
from a login node. The trainer builds five backbones; their weights are six files,
listed here as torchvision 0.29.1 lists them. tests/test_weights.py checks the table
against the installed torchvision (``get_model_weights(backbone)``: every member, its
URL, the default), so a torchvision that moves a file fails a test, not a job.

A weights name is what ``torchvision.models.get_weight`` takes (``ResNet18_Weights.IMAGENET1K_V1``,
``ResNet18_Weights.DEFAULT``), or what ``torchvision.models.get_model(name, weights=...)`` takes:
a member of the backbone's enum alone (``IMAGENET1K_V1``) or ``DEFAULT`` (its default).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

URL_ROOT = "https://download.pytorch.org/models/"
# backbone -> (its weights enum, {member: file under URL_ROOT}, the DEFAULT member)
WEIGHTS: dict[str, tuple[str, dict[str, str], str]] = {
    "alexnet": ("AlexNet_Weights", {"IMAGENET1K_V1": "alexnet-owt-7be5be79.pth"}, "IMAGENET1K_V1"),
    "densenet121": ("DenseNet121_Weights", {"IMAGENET1K_V1": "densenet121-a639ec97.pth"}, "IMAGENET1K_V1"),
    "resnet18": ("ResNet18_Weights", {"IMAGENET1K_V1": "resnet18-f37072fd.pth"}, "IMAGENET1K_V1"),
    "squeezenet1_0": ("SqueezeNet1_0_Weights", {"IMAGENET1K_V1": "squeezenet1_0-b66bff10.pth"}, "IMAGENET1K_V1"),
    # IMAGENET1K_FEATURES: the features only (its classifier is NaN), which is what a frozen backbone keeps
    "vgg16": ("VGG16_Weights", {"IMAGENET1K_V1": "vgg16-397923af.pth",
                                "IMAGENET1K_FEATURES": "vgg16_features-amdegroot-88682ab5.pth"}, "IMAGENET1K_V1"),
}
NAME = re.compile(r"^(?:(?P<enum>[A-Za-z0-9_]+_Weights)\.)?(?P<member>[A-Z0-9_]+)$")
HASH = re.compile(r"-([a-f0-9]+)\.")  # torch.hub's check_hash: the file name's last -<hex>. is a sha256 prefix


@dataclass(frozen=True)
class NamedWeights:
    """A torchvision weights name resolved: what was asked, its canonical name, the file."""

    asked: str  # as trainer.params.weights gave it (DEFAULT, IMAGENET1K_V1, ResNet18_Weights.IMAGENET1K_V1)
    name: str  # torchvision's full name of the member it means: ResNet18_Weights.IMAGENET1K_V1
    url: str  # where torchvision downloads it from

    @property
    def file(self) -> str:
        """The file's name: the URL's last part (the cache keeps torchvision's names)."""
        return self.url.rsplit("/", 1)[-1]

    @property
    def sha256_prefix(self) -> Optional[str]:
        """The hash prefix torchvision's file names carry (``resnet18-f37072fd.pth``), if any."""
        found = HASH.findall(self.file)
        return found[-1] if found else None


def is_path(value: str) -> bool:
    """A weights value that names a file rather than torchvision weights: it has a folder
    (``/``) or a file suffix (``.pth``, ``.pt``...), i.e. it cannot be a weights name."""
    return "/" in value or NAME.match(value) is None


def names_of(backbone: str) -> list[str]:
    """The weights names ``backbone`` takes: DEFAULT and its enum's members, fully named."""
    enum_name, members, _ = WEIGHTS[backbone]
    return ["DEFAULT"] + [f"{enum_name}.{m}" for m in members]


def resolve(backbone: str, value: Optional[str]) -> Optional[NamedWeights]:
    """The weights ``value`` names for ``backbone``; None for null or a PATH.

    Raises ``ValueError`` (one line: the names ``backbone`` takes, how to give a file)
    for a name that is not one of ``backbone``'s weights."""
    if not value or is_path(value):
        return None
    enum_name, members, default = WEIGHTS[backbone]
    m = NAME.match(value)
    if m is None:  # is_path said it is a name
        return None
    member = default if m["member"] == "DEFAULT" else m["member"]
    if (m["enum"] in (None, enum_name)) and member in members:
        return NamedWeights(asked=value, name=f"{enum_name}.{member}", url=URL_ROOT + members[member])
    other = next((b for b, (e, _, _) in WEIGHTS.items() if e == m["enum"]), None)
    foreign = other not in (None, backbone)
    why = (f"trainer.params.weights {value!r} names {other}'s weights, not {backbone}'s" if foreign
           else f"unknown trainer.params.weights {value!r} for backbone={backbone}")
    raise ValueError(f"{why}; name them as torchvision does: {', '.join(names_of(backbone))} "
                     f"(or a member alone, e.g. {default}), or give a state-dict file (trainer.params.weights=PATH) "
                     "or null (random init)")
