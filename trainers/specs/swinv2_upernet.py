"""trainer=swinv2_upernet: the reference workload, SwinV2 + UPerNet on ADE20K (MMSegmentation)."""

import enum
from dataclasses import dataclass, field
from typing import List, Optional

from trainers.spec import TrainerDef


class Variant(str, enum.Enum):
    base = "base"  # ~86.9M backbone parameters (the reference study's SwinV2-B)
    small = "small"
    tiny = "tiny"
    large = "large"
    micro = "micro"  # tests: a few hundred thousand parameters


@dataclass
class SwinV2UperNetParams:
    variant: Variant = Variant.base  # SwinV2 size
    window_size: int = 8  # attention window of every stage (SwinV2-B/w8)
    pretrained: Optional[str] = None  # local SwinV2 ImageNet checkpoint (timm or official keys); None: random init
    aux_head: bool = True  # FCN auxiliary head on stage 3, loss weight 0.4
    drop_path_rate: float = 0.3  # stochastic depth
    head_channels: Optional[int] = None  # UPerHead channels (default 512; 64 for micro), aux head gets half
    betas: List[float] = field(default_factory=lambda: [0.9, 0.999])  # AdamW betas
    warmup_iters: int = 1500  # linear warm-up iterations from lr x warmup_ratio
    warmup_ratio: float = 1.0e-6  # warm-up start factor of the lr
    poly_power: float = 1.0  # poly decay power to min_lr at the run's last iteration
    min_lr: float = 0.0  # poly decay floor
    log_interval: int = 50  # MMEngine LoggerHook interval (iterations)


TRAINER = TrainerDef(
    name="swinv2_upernet",
    study="the reference study: SwinV2 + UPerNet on ADE20K, weak scaling 160K/N iterations",
    params=SwinV2UperNetParams,
    build="trainers.mmseg.trainer:build",
)
