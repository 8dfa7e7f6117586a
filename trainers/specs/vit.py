"""trainer=vit: ViT-B/16 (timm) on CIFAR-10/100, DDP or DeepSpeed."""

import enum
from dataclasses import dataclass
from typing import Optional

from trainers.spec import Optimizer, TrainerDef

DEEPSPEED_INSTALL = "pip install -c constraints.txt 'campaign[deepspeed]'"


class Model(str, enum.Enum):
    vit_base_patch16_224 = "vit_base_patch16_224"  # ViT-B/16
    vit_tiny = "vit_tiny"  # tests: 32x32 images, 2 blocks of width 32


class Engine(str, enum.Enum):
    ddp = "ddp"  # torch DDP, autocast for fp16/bf16
    deepspeed = "deepspeed"  # DeepSpeed (ZeRO stage zero_stage), its own fp16/bf16 modes


@dataclass
class ViTParams:
    model: Model = Model.vit_base_patch16_224  # the network
    image_size: Optional[int] = None  # model input side (default: the model's, 224 for ViT-B/16)
    weights: Optional[str] = None  # local state-dict file (head skipped when the class count differs)
    engine: Engine = Engine.ddp  # who runs the replicas
    zero_stage: int = 0  # DeepSpeed ZeRO stage (engine=deepspeed)


TRAINER = TrainerDef(
    name="vit",
    study="ViT on CIFAR: strong scaling and weak scaling by dataset share, DDP vs DeepSpeed",
    params=ViTParams,
    build="trainers.vit:build",
    engine_requires={Engine.deepspeed.value: ("deepspeed", DEEPSPEED_INSTALL)},
    optimizers=(Optimizer.adamw, Optimizer.sgd),
)
