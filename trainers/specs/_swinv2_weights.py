"""The SwinV2 backbone checkpoints ``trainer.params.pretrained`` may name, torch-free: the
launch (campaign/launch/weights.py, the mechanism torchvision's names use) fetches the
file once into ``<results_dir>/weights/`` and checks it; the job loads it
(trainers/mmseg/backbone.py: ``load_pretrained``, keys converted by
trainers/mmseg/swinv2_keys.py).

The one entry: SwinV2-B pretrained on ImageNet-22K at 192x192 with window 12, the
checkpoint SwinV2's own downstream fine-tuning starts from (microsoft/Swin-Transformer's
``swinv2_base_patch4_window12_192_22k.pth``; its ADE20K and ImageNet-1K fine-tuning
configs set PRETRAINED_WINDOW_SIZES 12, 12, 12, 6), as OpenMMLab republished it
(mmpretrain's configs/swin_transformer_v2 README and metafile: model
``swinv2-base-w12_3rdparty_in21k-192px``, "converted from the official repo"). This copy
rather than Microsoft's: Microsoft publishes no digest and its file name carries none,
while OpenMMLab's names carry the first 8 hex digits of the file's sha256 (its
publish_model convention, read the way torch.hub reads torchvision's), so the launch
checks the file before any job loads it. No full sha256 is published for either. The
thesis does not name the file it started from (docs/cluster.md).
"""

from __future__ import annotations

from typing import Optional

from trainers.specs._torchvision_weights import NamedWeights

# name -> (URL, the SwinV2 variant it fits, the window sizes it was trained with per stage)
WEIGHTS: dict[str, tuple[str, str, tuple[int, int, int, int]]] = {
    "swinv2-base-w12_3rdparty_in21k-192px": (
        "https://download.openmmlab.com/mmclassification/v0/swin-v2/pretrain/"
        "swinv2-base-w12_3rdparty_in21k-192px_20220803-f7dc9763.pth", "base", (12, 12, 12, 6)),
}
REFERENCE = "swinv2-base-w12_3rdparty_in21k-192px"  # study=swinv2_thesis's (conf/study/swinv2_thesis.yaml)


def resolve(value: Optional[str]) -> Optional[NamedWeights]:
    """The checkpoint ``value`` names; None for null or anything else (a PATH)."""
    if not value or str(value) not in WEIGHTS:
        return None
    return NamedWeights(asked=str(value), name=str(value), url=WEIGHTS[str(value)][0])


def window_sizes(value: Optional[str]) -> tuple[int, ...]:
    """The window sizes the named checkpoint was trained with (the backbone's
    ``pretrained_window_sizes``: its continuous position bias is scaled to them); zeros for
    a PATH or none (a checkpoint trained with the model's own window)."""
    return WEIGHTS[str(value)][2] if value and str(value) in WEIGHTS else (0, 0, 0, 0)


def check(variant: str, value: Optional[str]) -> None:
    """ValueError (one line) for a named checkpoint of another variant than ``variant``."""
    if value and str(value) in WEIGHTS and WEIGHTS[str(value)][1] != variant:
        raise ValueError(f"trainer.params.pretrained={value} is SwinV2-{WEIGHTS[str(value)][1]}'s checkpoint; "
                         f"variant={variant} cannot load it: use trainer.params.variant={WEIGHTS[str(value)][1]}, "
                         "a checkpoint of this variant (PATH), or trainer.params.pretrained=null")
