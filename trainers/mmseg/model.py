"""The MMSegmentation config of the reference workload: SwinV2 + UPerNet, AdamW, warm-up + poly.

Pure functions of the job's config section (plain dicts): the same dicts mmseg's
``configs/swin/*upernet*ade20k*.py`` spell out, with the SwinV2 backbone from
``trainers.mmseg.backbone`` and the SwinV2 no-weight-decay rules.
"""

from __future__ import annotations

from typing import Any

import torch

from trainers.mmseg import compat
from trainers.mmseg.backbone import VARIANTS, variant_channels
from trainers.specs._swinv2_weights import window_sizes
from trainers.specs.swinv2_upernet import TRAINER, Loop

# trainer.params knobs and their defaults: declared once, in trainers/specs/swinv2_upernet.py.
PARAMS: dict[str, Any] = TRAINER.defaults()
OPTIMIZERS = ("adamw", "sgd")
# ImageNet statistics in 0..255 (mmseg's SegDataPreProcessor convention)
MEAN = [123.675, 116.28, 103.53]
STD = [58.395, 57.12, 57.375]
# Parameters kept out of weight decay besides norms (SwinV2's own rule: logit scale, the
# continuous position-bias MLP and relative position tables).
NO_DECAY_KEYS = ("logit_scale", "cpb_mlp", "relative_position_bias_table", "absolute_pos_embed")


def params_of(tcfg: dict) -> dict[str, Any]:
    """``trainer.params`` over the defaults; unknown knobs are refused with the valid ones."""
    given = dict(tcfg.get("params") or {})
    unknown = sorted(set(given) - set(PARAMS))
    if unknown:
        raise ValueError(f"unknown trainer.params {', '.join(unknown)} for swinv2_upernet; "
                         f"available: {', '.join(PARAMS)}")
    out = {**PARAMS, **{k: v for k, v in given.items() if v is not None}}
    if out["variant"] not in VARIANTS:
        raise ValueError(f"unknown trainer.params.variant '{out['variant']}'; available: {', '.join(VARIANTS)}")
    out["loop"] = getattr(out["loop"], "value", out["loop"])  # an enum member from a Python caller
    loops = [m.value for m in Loop]
    if out["loop"] not in loops:
        raise ValueError(f"unknown trainer.params.loop '{out['loop']}'; available: {', '.join(loops)}")
    return out


def model_config(cfg: dict, device: torch.device, world_size: int) -> dict:
    """The EncoderDecoder config for the job's ``trainer`` and ``dataset`` sections."""
    p = params_of(cfg["trainer"])
    data = cfg["dataset"]
    crop = int(data["image_size"])
    num_classes = int(data["num_classes"])
    channels = variant_channels(p["variant"])
    head = int(p["head_channels"] or (64 if p["variant"] == "micro" else 512))
    norm = compat.norm_cfg(device, world_size)
    model = dict(
        type="EncoderDecoder",
        data_preprocessor=dict(type="SegDataPreProcessor", mean=MEAN, std=STD, bgr_to_rgb=True,
                               pad_val=0, seg_pad_val=255, size=(crop, crop)),
        backbone=dict(type="SwinV2Timm", variant=p["variant"], img_size=crop, window_size=int(p["window_size"]),
                      drop_path_rate=float(p["drop_path_rate"]),
                      # the file the launch resolved (a name fetched into <results_dir>/weights/, a PATH), checked
                      # against its digest at launch; a named checkpoint's window sizes scale the position bias
                      pretrained=p.get("weights_file") or p["pretrained"], pretrained_sha256=p.get("weights_sha256"),
                      pretrained_window_sizes=window_sizes(p["pretrained"])),
        decode_head=dict(
            type="UPerHead", in_channels=channels, in_index=[0, 1, 2, 3], pool_scales=(1, 2, 3, 6),
            channels=head, dropout_ratio=0.1, num_classes=num_classes, norm_cfg=norm, align_corners=False,
            loss_decode=dict(type="CrossEntropyLoss", use_sigmoid=False, loss_weight=1.0)),
        train_cfg=dict(),
        test_cfg=dict(mode="whole"),
    )
    if p["aux_head"]:
        model["auxiliary_head"] = dict(
            type="FCNHead", in_channels=channels[2], in_index=2, channels=head // 2, num_convs=1,
            concat_input=False, dropout_ratio=0.1, num_classes=num_classes, norm_cfg=norm, align_corners=False,
            loss_decode=dict(type="CrossEntropyLoss", use_sigmoid=False, loss_weight=0.4))
    return model


def optim_wrapper_config(tcfg: dict, device: torch.device, grad_accum: int = 1) -> dict:
    """AdamW (or SGD) with no weight decay on norms, logit scale, cpb_mlp and position tables;
    the wrapper for the precision and loop (compat.optim_wrapper_type)."""
    p = params_of(tcfg)
    name = str(tcfg.get("optimizer", "adamw")).lower()
    lr, wd = float(tcfg.get("lr", 6e-5)), float(tcfg.get("weight_decay", 0.01))
    if name == "adamw":
        optimizer = dict(type="AdamW", lr=lr, betas=tuple(float(b) for b in p["betas"]), weight_decay=wd)
    elif name == "sgd":
        optimizer = dict(type="SGD", lr=lr, momentum=float(tcfg.get("momentum", 0.9)), weight_decay=wd)
    else:
        raise ValueError(f"unknown trainer.optimizer '{name}' for swinv2_upernet; available: {', '.join(OPTIMIZERS)}")
    wrapper = compat.optim_wrapper_type(device, str(tcfg.get("precision", "fp32")), stock=p["loop"] == "stock")
    wrapper.update(
        optimizer=optimizer,
        accumulative_counts=int(grad_accum),
        paramwise_cfg=dict(norm_decay_mult=0.0,  # every LayerNorm/BN/SyncBN, by type
                           custom_keys={k: dict(decay_mult=0.0) for k in NO_DECAY_KEYS}),
    )
    return wrapper


def param_scheduler_config(tcfg: dict, max_iters: int) -> list[dict]:
    """Linear warm-up over ``warmup_iters``, then poly decay to ``min_lr`` at ``max_iters``."""
    p = params_of(tcfg)
    warmup = min(int(p["warmup_iters"]), int(max_iters))
    schedulers = []
    if warmup > 0:
        schedulers.append(dict(type="LinearLR", start_factor=float(p["warmup_ratio"]), by_epoch=False,
                               begin=0, end=warmup))
    if warmup < max_iters:
        schedulers.append(dict(type="PolyLR", eta_min=float(p["min_lr"]), power=float(p["poly_power"]),
                               begin=warmup, end=int(max_iters), by_epoch=False))
    return schedulers
