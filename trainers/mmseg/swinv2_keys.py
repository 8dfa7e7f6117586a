"""OpenMMLab's SwinV2 checkpoints (mmpretrain's ``SwinTransformerV2``, e.g. the
ImageNet-22K SwinV2-B that study=swinv2_thesis fine-tunes from) as timm's SwinV2 names them.

mmpretrain republished Microsoft's weights under its own module tree (its README: "converted
from the official repo"); the mapping below inverts that conversion, module by module, as
mmpretrain's modules (mmpretrain/models/backbones/swin_transformer_v2.py, models/utils
attention.py and embed.py) and timm's (timm/models/swin_transformer_v2.py) name them:

- ``patch_embed.projection`` -> ``patch_embed.proj`` (the 4x4 convolution), its ``norm`` kept;
- ``stages.N`` -> ``layers.N``: both put stage N's patch merging at its start (N >= 1);
- ``attn.w_msa.X`` -> ``attn.X`` (ShiftWindowMSA wraps WindowMSAV2: logit_scale, cpb_mlp,
  qkv, q_bias, v_bias, proj keep their names);
- ``ffn.layers.0.0`` -> ``mlp.fc1``, ``ffn.layers.1`` -> ``mlp.fc2`` (mmcv's FFN);
- ``downsample.reduction.weight``: mmpretrain's PatchMerging gathers each 2x2 patch with
  ``nn.Unfold``, whose input column is ``c * 4 + (kh * 2 + kw)``; timm's (as Microsoft's)
  concatenates the four pixels (0,0), (1,0), (0,1), (1,1), column ``j * C + c``. The
  columns are put back in timm's order (the inverse of mmseg's swin2mmseg
  ``correct_unfold_reduction_order``); its post-norm over the 2C outputs needs nothing;
- the output norms (``norm3``), the classifier head (``head.``) and the buffers rebuilt
  from the window size (``relative_position_index``, ``relative_coords_table``) are dropped.

tests/test_swinv2_weights.py checks it against mmcv's Unfold-based patch merging and on a
state dict of mmpretrain's real key names.
"""

from __future__ import annotations

import re
from typing import Any

_DROP = ("relative_position_index", "relative_coords_table", "attn_mask")
_RENAMES = (
    (re.compile(r"^patch_embed\.projection\."), "patch_embed.proj."),
    (re.compile(r"^stages\.(\d+)\."), r"layers.\1."),
    (re.compile(r"\.attn\.w_msa\."), ".attn."),
    (re.compile(r"\.ffn\.layers\.0\.0\."), ".mlp.fc1."),
    (re.compile(r"\.ffn\.layers\.1\."), ".mlp.fc2."),
)
UNFOLD_TO_CONCAT = (0, 2, 1, 3)  # timm's pixel j=(0,0),(1,0),(0,1),(1,1) is Unfold's offset kh*2+kw: 0, 2, 1, 3


def is_mmpretrain(state: dict[str, Any]) -> bool:
    """Whether ``state`` (its ``backbone.`` prefix removed or not) has mmpretrain's SwinV2 names."""
    return any(re.match(r"^(backbone\.)?stages\.\d+\.blocks\.", k) for k in state)


def unfold_columns_to_timm(weight: Any) -> Any:
    """A patch merging's ``reduction.weight`` (out, 4C) from Unfold's column order to timm's."""
    out, four_c = weight.shape
    w = weight.reshape(out, four_c // 4, 4).transpose(1, 2)  # [o, offset, c]
    return w[:, list(UNFOLD_TO_CONCAT), :].reshape(out, four_c)


def from_mmpretrain(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` with timm's SwinV2 names (module docstring): the backbone's tensors only."""
    out: dict[str, Any] = {}
    for key, value in state.items():
        if key.startswith("backbone."):
            key = key[len("backbone."):]
        elif key.startswith(("head.", "neck.")):
            continue
        if any(part in key for part in _DROP) or re.match(r"^norm\d+\.", key):
            continue
        for pattern, repl in _RENAMES:
            key = pattern.sub(repl, key)
        if key.endswith(".downsample.reduction.weight"):
            value = unfold_columns_to_timm(value)
        out[key] = value
    return out
