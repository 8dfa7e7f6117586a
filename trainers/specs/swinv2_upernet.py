"""trainer=swinv2_upernet: the reference workload, SwinV2 + UPerNet on ADE20K (MMSegmentation)."""

import enum
from dataclasses import dataclass, field
from typing import List, Optional

from trainers.spec import MeasuredMFU, Optimizer, TrainerDef, Unused
from trainers.specs import _swinv2_weights


class Variant(str, enum.Enum):
    base = "base"  # ~86.9M backbone parameters (the reference study's SwinV2-B)
    small = "small"
    tiny = "tiny"
    large = "large"
    micro = "micro"  # tests: a few hundred thousand parameters


class Loop(str, enum.Enum):
    """``trainer.params.loop``: how an iteration is run (trainers/mmseg/trainer.py)."""

    lean = "lean"  # the step inlined phase by phase, MMEngine's overheads left out (trainers/mmseg/speed.py)
    stock = "stock"  # MMEngine's IterBasedTrainLoop.run_iter as MMSegmentation configures it (the reference study's)


# Training FLOPs (forward + backward) of ONE ITERATION of 8 images (the study's images
# per GPU) with ADE20K's 150 classes and every other trainer.params knob at its default
# (window 8, aux head, 512 head channels, 64 for micro), per (variant, crop), as
# torch.utils.flop_counter counts them (the Recorder's counter, trainers/flops.py: an
# H100 run of SwinV2-B at 512 counted its 14.1 TFLOP, issue #23). Measured by
#     python -m trainers.mmseg.flops --table      (trainers/mmseg/flops.py; --device meta)
# and checked by tests/test_reference_study.py, which recounts the micro entry on a CPU.
# Integers: the counter's exact count. Per image: /8 (the position-bias MLP, ~0.3 GFLOP
# per iteration, does not scale with the batch: < 0.02 % of an image at other batches).
FLOPS_MEASURED_WITH = "python -m trainers.mmseg.flops --table"
FLOPS_BATCH, FLOPS_CLASSES = 8, 150
FLOPS_PER_ITERATION = {
    ("micro", 64): 3_472_503_808,  # tests
    ("micro", 128): 13_803_615_232,  # tests
    ("tiny", 512): 11_326_350_440_448,
    ("tiny", 640): 17_738_355_456_000,
    ("small", 512): 12_399_129_114_624,
    ("small", 640): 19_414_509_926_400,
    ("base", 512): 14_134_138_576_896,  # the reference study's SwinV2-B at 512x512: 14.1 TFLOP
    ("base", 640): 22_156_806_660_096,
    ("large", 512): 19_024_717_934_592,
    ("large", 640): 29_887_600_914_432,
}

# MFU measured (issue #23, 2026-11-26): SwinV2-B/UPerNet, 8 synthetic 512x512 ADE20K-shaped
# images, bf16 autocast, 1 GPU, on a lent NVIDIA H200 (compute capability 9.0, torch
# 2.11.0+cu130, driver 580.159.04): 0.248 s per iteration (mean of 20 timed), the table's
# 14.1 TFLOP at 56.9 TFLOP/s = 0.0575 of the 989.4 TFLOP/s bf16 peak. The run:
#     campaign launch platform=local_gpu gpus=1 trainer=swinv2_upernet experiment=profile \
#         trainer.precision=bf16 trainer.params.variant=base name=gpu-swin
# Its store is tests/golden/h200/campaign.db (tests/test_h200_golden.py rederives this figure).
# Hopper only: other GPUs and math modes keep the estimate's assumed share.
MEASURED_MFU = (MeasuredMFU(math="bf16", compute_capability=9.0, mfu=0.0575161, measured_on="H200 bf16"),)


def _param(params, name: str, default):
    """A trainer.params knob of a point's config (a mapping), its default where unset."""
    value = params.get(name)
    value = default if value is None else value
    return value.value if isinstance(value, enum.Enum) else value


def flops_per_image(config) -> Optional[float]:
    """Training FLOPs of one image from the table (``FLOPS_PER_ITERATION`` / 8) for the
    point's variant and crop (``dataset.image_size``), with the class count's own share
    added exactly: each class is a 1x1 output channel of the decode head (``head``
    channels at 1/4 of the crop) and of the aux head (``head/2`` at 1/16), 2 FLOPs per
    multiply-add in the forward, the input gradient and the weight gradient. None (unknown) for a crop or variant the
    table lacks, another window, no aux head, other head channels or other than 3 image
    channels: those change the network, and a guess would pass for a measurement."""
    params = (config.get("trainer") or {}).get("params") or {}
    data = config.get("dataset") or {}
    variant = str(_param(params, "variant", Variant.base))
    crop = data.get("image_size")
    stated = FLOPS_PER_ITERATION.get((variant, int(crop) if crop else None))
    default_head = 64 if variant == Variant.micro.value else 512
    head = int(_param(params, "head_channels", default_head))
    if (stated is None or int(_param(params, "window_size", 8)) != 8 or not _param(params, "aux_head", True)
            or head != default_head or int(data.get("channels") or 3) != 3):
        return None
    classes = int(data.get("num_classes") or FLOPS_CLASSES)
    per_class = 6 * (head * (int(crop) // 4) ** 2 + head // 2 * (int(crop) // 16) ** 2)
    return stated / FLOPS_BATCH + (classes - FLOPS_CLASSES) * per_class


@dataclass
class SwinV2UperNetParams:
    variant: Variant = Variant.base  # SwinV2 size
    window_size: int = 8  # attention window of every stage (SwinV2-B/w8)
    # the backbone's ImageNet checkpoint: null (random init), a name the launch fetches once into
    # <results_dir>/weights/ (trainers/specs/_swinv2_weights.py: swinv2-base-w12_3rdparty_in21k-192px),
    # or a PATH (timm, official or mmpretrain keys)
    pretrained: Optional[str] = None
    weights_file: Optional[str] = None  # set by the launch: the file the job loads (pretrained resolved)
    # set by the launch: that file's sha256, which the job checks on the bytes it loads (docs/security.md)
    weights_sha256: Optional[str] = None
    aux_head: bool = True  # FCN auxiliary head on stage 3, loss weight 0.4
    drop_path_rate: float = 0.3  # stochastic depth
    head_channels: Optional[int] = None  # UPerHead channels (default 512; 64 for micro), aux head gets half
    betas: List[float] = field(default_factory=lambda: [0.9, 0.999])  # AdamW betas
    warmup_iters: int = 1500  # linear warm-up iterations from lr x warmup_ratio
    warmup_ratio: float = 1.0e-6  # warm-up start factor of the lr
    poly_power: float = 1.0  # poly decay power to min_lr at the run's last iteration
    min_lr: float = 0.0  # poly decay floor
    log_interval: int = 50  # MMEngine LoggerHook interval (iterations)
    loop: Loop = Loop.lean  # lean: timed phase by phase, MMEngine's overheads left out; stock: MMEngine's own loop


# What it does not read where (trainers/spec.py: Unused; momentum under AdamW: COMMON_UNUSED).
UNUSED = (
    Unused("trainer.params.betas", {"trainer.optimizer": (Optimizer.sgd.value,)},
           why="SGD has no betas; its momentum is trainer.momentum", fix="drop it or use trainer.optimizer=adamw"),
    Unused("trainer.params.warmup_ratio", {"trainer.params.warmup_iters": (0,)},
           why="it is the warm-up's start factor, and there is no warm-up",
           fix="set trainer.params.warmup_iters > 0 too, or drop it"),
    # the stock loop reads even synthetic data through MMEngine's DataLoader, with these workers
    Unused("dataset.num_workers", {"dataset.name": ("synthetic",), "trainer.params.loop": (Loop.lean.value,)},
           why="the lean loop pre-makes synthetic batches on the device and starts no workers",
           fix="drop it, or use trainer.params.loop=stock (MMEngine's DataLoader) or a dataset.root"),
)


def named_weights(params):
    """The checkpoint ``params.pretrained`` names (None: null or a PATH)."""
    return _swinv2_weights.resolve(params.get("pretrained"))


def _check(config) -> None:
    p = config["trainer"]["params"]
    _swinv2_weights.check(str(_param(p, "variant", Variant.base)), p.get("pretrained"))


TRAINER = TrainerDef(
    name="swinv2_upernet",
    study="the reference study: SwinV2 + UPerNet on ADE20K, weak scaling 160K/N iterations",
    params=SwinV2UperNetParams,
    build="trainers.mmseg.trainer:build",
    dataset="ade20k",  # the study's: 512 crops, 150 classes (synthetic batches of them without dataset.root)
    flops_per_image=flops_per_image,  # the measured table above: estimates, GPU-hours
    measured_mfu=MEASURED_MFU,  # the H200 run above: the estimate's share of the peak on Hopper in bf16
    # experiment.checkpoint=true: model, optim wrapper, LR schedule and data position
    # (trainers/mmseg/trainer.py's state_dict and resume_at)
    checkpoint=True,
    iteration_is_step=False,
    unused=UNUSED,  # mmseg's loop: one iteration is one micro-batch (accumulative_counts)
    check=_check,
    named_weights=named_weights,  # the launch fetches a named checkpoint once (campaign/launch/weights.py)
    weights_param="pretrained",
)
