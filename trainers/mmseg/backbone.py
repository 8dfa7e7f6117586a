"""SwinV2 from timm (the maintained implementation) as an MMSegmentation backbone.

``SwinV2Timm`` is a thin wrapper registered in mmseg's MODELS: it runs timm's
``SwinTransformerV2`` stage by stage and returns the four stage outputs as NCHW maps,
each through its own LayerNorm (as mmseg's Swin does for UPerNet). It does not use
timm's ``features_only`` wrapper: that one renames the stages (``layers_0``), which
breaks checkpoint key names, and returns NHWC maps; here the stages are called directly
and each NHWC output is normalised and then permuted to NCHW.

timm's SwinV2 checks that the input is exactly ``img_size`` (its attention masks are
built for that grid): a smaller input is zero-padded bottom/right to ``img_size`` and the
maps are cropped back to the input's extent; a larger one is refused with the fix.
"""

from __future__ import annotations

import math
import os
from typing import Optional, Sequence

import torch
import torch.nn.functional as F
from mmengine.model import BaseModule
from mmseg.registry import MODELS
from torch import nn

# variant -> (embed_dim, depths, num_heads); base/small/tiny/large as in the SwinV2 paper.
VARIANTS = {
    "micro": (32, (1, 1, 1, 1), (1, 2, 4, 8)),  # tests: a few hundred thousand parameters
    "tiny": (96, (2, 2, 6, 2), (3, 6, 12, 24)),
    "small": (96, (2, 2, 18, 2), (3, 6, 12, 24)),
    "base": (128, (2, 2, 18, 2), (4, 8, 16, 32)),
    "large": (192, (2, 2, 18, 2), (6, 12, 24, 48)),
}
PATCH = 4
STRIDE = 32  # total downsampling of the last stage: inputs must be a multiple of it


class PretrainedError(ValueError):
    """The ``pretrained`` file is missing or does not fit the variant."""


def variant_channels(variant: str) -> list[int]:
    """Channels of the four output maps of ``variant``."""
    embed = _variant(variant)[0]
    return [embed * 2**i for i in range(4)]


def _variant(name: str):
    try:
        return VARIANTS[name]
    except KeyError:
        raise ValueError(f"unknown SwinV2 variant '{name}'; available: {', '.join(VARIANTS)}") from None


@MODELS.register_module()
class SwinV2Timm(BaseModule):
    """timm SwinV2 stages -> four NCHW maps with strides 4, 8, 16, 32.

    Args:
        variant: one of ``VARIANTS``.
        img_size: input side the attention masks are built for (the crop size).
        window_size: attention window (8 for SwinV2-B/w8).
        drop_path_rate: stochastic depth, linearly increasing over the blocks.
        pretrained: local ImageNet checkpoint (timm, official or mmpretrain SwinV2 key names).
        pretrained_window_sizes: window sizes the checkpoint was trained with (0: none).
        pretrained_sha256: the digest the launch recorded for it (checked on the bytes loaded).
    """

    def __init__(self, variant: str = "base", img_size: int = 512, window_size: int = 8,
                 drop_path_rate: float = 0.3, pretrained: Optional[str] = None,
                 pretrained_window_sizes: Sequence[int] = (0, 0, 0, 0), init_cfg=None,
                 pretrained_sha256: Optional[str] = None):
        super().__init__(init_cfg=init_cfg)
        from timm.models.swin_transformer_v2 import SwinTransformerV2

        embed, depths, heads = _variant(variant)
        if img_size % STRIDE:
            raise ValueError(f"SwinV2 img_size={img_size} is not a multiple of {STRIDE}; "
                             f"use e.g. dataset.image_size={max(STRIDE, round(img_size / STRIDE) * STRIDE)}")
        self.variant, self.img_size, self.pretrained = variant, int(img_size), pretrained
        self.pretrained_sha256 = pretrained_sha256
        self.swin = SwinTransformerV2(
            img_size=img_size, patch_size=PATCH, embed_dim=embed, depths=depths, num_heads=heads,
            window_size=window_size, drop_path_rate=drop_path_rate, num_classes=0,
            pretrained_window_sizes=tuple(pretrained_window_sizes))
        self.swin.norm = nn.Identity()  # sized for classification; the per-stage norms replace it
        self.channels = variant_channels(variant)
        self.out_norms = nn.ModuleList(nn.LayerNorm(c) for c in self.channels)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        h, w = x.shape[-2:]
        if h > self.img_size or w > self.img_size:
            raise ValueError(f"input {h}x{w} is larger than the backbone's img_size={self.img_size}; "
                             f"set dataset.image_size (the crop) to at least {max(h, w)}")
        if (h, w) != (self.img_size, self.img_size):
            x = F.pad(x, (0, self.img_size - w, 0, self.img_size - h))
        x = self.swin.patch_embed(x)  # NHWC from here on
        outs = []
        for i, (stage, norm) in enumerate(zip(self.swin.layers, self.out_norms)):
            x = stage(x)
            stride = PATCH * 2**i
            y = norm(x)[:, : math.ceil(h / stride), : math.ceil(w / stride)]
            outs.append(y.permute(0, 3, 1, 2).contiguous())
        return tuple(outs)

    def init_weights(self) -> None:
        # timm initialised the weights in its constructor; only a checkpoint replaces them.
        if self.pretrained:
            load_pretrained(self.swin, self.pretrained, self.pretrained_sha256)
        self._is_init = True


def load_pretrained(swin: nn.Module, path: str, sha256: Optional[str] = None) -> None:
    """Load SwinV2 ImageNet weights (timm, official or mmpretrain key names: swinv2_keys.py)
    into ``swin``; with ``sha256``, only bytes that have it (the launch's record).

    Classifier head and final norm are dropped; the position-bias buffers are rebuilt by
    the model. Raises PretrainedError (one line) on a missing file or keys that do not fit.
    """
    from timm.models.swin_transformer_v2 import checkpoint_filter_fn

    from trainers.mmseg.swinv2_keys import from_mmpretrain, is_mmpretrain

    path = os.path.expanduser(str(path))
    if not os.path.isfile(path):
        raise PretrainedError(f"pretrained={path}: no such file; give a local SwinV2 ImageNet checkpoint "
                              f"(.pth or .safetensors) or pretrained=null")
    try:
        if path.endswith(".safetensors"):  # read through the door too: no link, bounded, checked
            from safetensors.torch import load

            from campaign_door import WEIGHTS_MAX_BYTES, read_checked, read_file

            state = load(read_checked(path, sha256) if sha256 else read_file(path, WEIGHTS_MAX_BYTES))
        else:
            from trainers.state_file import load_state

            state = load_state(path, sha256)
    except Exception as exc:
        raise PretrainedError(f"pretrained={path}: cannot read it ({type(exc).__name__}: "
                              f"{str(exc).splitlines()[0][:200]})") from exc
    if isinstance(state, dict):
        state = state.get("model", state.get("state_dict", state))
    if not isinstance(state, dict):
        raise PretrainedError(f"pretrained={path}: holds a {type(state).__name__}, not a state dict")
    prefix = "backbone.swin." if any(k.startswith("backbone.swin.") for k in state) else ""
    state = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
    if is_mmpretrain(state):  # OpenMMLab's republished checkpoints: their names -> timm's
        state = from_mmpretrain(state)
    else:
        state = checkpoint_filter_fn(state, swin)  # official names -> timm's, buffers dropped
    state = {k: v for k, v in state.items() if not k.startswith(("head.", "norm."))}
    own = swin.state_dict()
    missing = sorted(k for k in own if k not in state)
    unexpected = sorted(k for k in state if k not in own)
    wrong = sorted(k for k in state if k in own and tuple(state[k].shape) != tuple(own[k].shape))
    if missing or unexpected or wrong:
        parts = [f"{len(missing)} missing (e.g. {missing[0]})" if missing else "",
                 f"{len(unexpected)} unexpected (e.g. {unexpected[0]})" if unexpected else "",
                 f"{len(wrong)} of another shape (e.g. {wrong[0]}: {tuple(state[wrong[0]].shape)} vs "
                 f"{tuple(own[wrong[0]].shape)})" if wrong else ""]
        raise PretrainedError(f"pretrained={path} does not fit this SwinV2 variant: "
                              f"{'; '.join(p for p in parts if p)} keys; check trainer.params.variant")
    swin.load_state_dict(state, strict=True)
