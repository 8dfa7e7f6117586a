"""trainer=vit: ViT-B/16 (timm) on CIFAR-10/100, DDP or DeepSpeed."""

import enum
from dataclasses import dataclass
from typing import Optional

from trainers.spec import Optimizer, TrainerDef, Unused

DEEPSPEED_INSTALL = "pip install -c constraints.txt 'campaign[deepspeed]'"


class Model(str, enum.Enum):
    vit_base_patch16_224 = "vit_base_patch16_224"  # ViT-B/16
    vit_tiny = "vit_tiny"  # tests: 32x32 images, 2 blocks of width 32


class Engine(str, enum.Enum):
    ddp = "ddp"  # torch DDP, autocast for fp16/bf16
    deepspeed = "deepspeed"  # DeepSpeed (ZeRO stage zero_stage), its own fp16/bf16 modes


# The networks' shapes (trainers/vit.py builds them; tests/test_dry_run.py checks these
# against its models): image side, patch side, width, blocks, MLP ratio.
SHAPES = {"vit_base_patch16_224": (224, 16, 768, 12, 4.0), "vit_tiny": (32, 8, 32, 2, 2.0)}


def flops_per_image(config) -> float:
    """Training FLOPs of one image (2 per multiply-add): forward, then backward's weight
    and input gradients (the patch embedding needs no input gradient), over the patch
    embedding, every block's qkv, attention (QK^T and AV), projection and MLP, and the
    class-token head."""
    p, classes = config["trainer"]["params"], int(config["dataset"].get("num_classes") or 10)
    side, patch, width, depth, ratio = SHAPES[str(p.get("model") or "vit_base_patch16_224")]
    side = int(p.get("image_size") or side)
    patches = (side // patch) ** 2
    tokens = patches + 1  # and the class token
    embed = 2.0 * 3 * patch * patch * width * patches
    linear = depth * 2.0 * tokens * width * (3 * width + width + 2 * int(width * ratio)) + 2.0 * width * classes
    attention = depth * 4.0 * tokens * tokens * width
    return 2 * embed + 3 * (linear + attention)


@dataclass
class ViTParams:
    model: Model = Model.vit_base_patch16_224  # the network
    image_size: Optional[int] = None  # model input side (default: the model's, 224 for ViT-B/16)
    weights: Optional[str] = None  # local state-dict file (head skipped when the class count differs)
    # set by the launch: the weights file's sha256, which the job checks on the bytes it loads (docs/security.md)
    weights_sha256: Optional[str] = None
    engine: Engine = Engine.ddp  # who runs the replicas
    zero_stage: int = 0  # DeepSpeed ZeRO stage (engine=deepspeed)


TRAINER = TrainerDef(
    name="vit",
    study="ViT on CIFAR: strong scaling and weak scaling by dataset share, DDP vs DeepSpeed",
    params=ViTParams,
    build="trainers.vit:build",
    engine_requires={Engine.deepspeed.value: ("deepspeed", DEEPSPEED_INSTALL)},
    optimizers=(Optimizer.adamw, Optimizer.sgd),
    flops_per_image=flops_per_image,
    evaluates=True,
    # trainer.momentum under AdamW: trainers/spec.py's COMMON_UNUSED
    unused=(Unused("trainer.params.zero_stage", {"trainer.params.engine": (Engine.ddp.value,)},
                   why="ZeRO is DeepSpeed's; DDP keeps a whole replica per rank",
                   fix="drop it or use trainer.params.engine=deepspeed"),),
    dataset="cifar10",  # the study's: 32x32, 10 classes (synthetic batches of them without dataset.root)
)
