"""Every known trap of MMSegmentation 1.x / MMEngine on this stack, handled in one place.

Each fix is deliberate and narrow; the trainer calls ``apply()`` once before it imports
anything from ``mmseg.models`` and builds through the helpers below.

1. ``import mmseg.models`` fails with mmcv-lite (no compiled ``mmcv._ext``): four mmseg
   files import ``mmcv.ops`` at module level (``utils/mask_classification.py``,
   ``models/utils/point_sample.py``, ``decode_heads/san_head.py``,
   ``losses/focal_loss.py``) for ops this workload never runs (point sampling, SAN,
   focal loss). ``stub_mmcv_ops`` installs, only when ``mmcv._ext`` is absent, an
   ``mmcv.ops`` holding those two names as functions that raise when called; any other
   name raises ModuleNotFoundError, exactly as the real package does without ``_ext``,
   so mmseg's guarded imports (CCHead, PointHead, PSAHead) still fall back to None.
   With the full mmcv build (the container image) nothing is stubbed.
2. ``Runner(launcher='pytorch')`` calls ``init_dist`` -> ``torch.cuda.set_device`` even on
   CPU, and reads ``LOCAL_RANK`` (submitit does not set it). We initialise
   torch.distributed ourselves (trainers/dist.py) and build the Runner with
   ``RUNNER_LAUNCHER = 'none'``; MMEngine's dist helpers still see our process group.
3. The Runner's default DDP wrapper passes ``device_ids=[LOCAL_RANK]``, which CPU (gloo)
   DDP refuses: ``wrap_ddp`` builds MMDistributedDataParallel itself, ``device_ids=None``
   on CPU, before the Runner sees the model (the Runner leaves a wrapped model alone).
4. SyncBN needs NCCL (it fails on CPU/gloo): ``norm_cfg`` picks SyncBN on CUDA with more
   than one rank, BN otherwise.
5. Since torch 2.6 ``torch.load`` defaults to ``weights_only=True``; MMEngine's local
   checkpoint loader (``load_from``/``resume``) calls it without the argument, and an
   MMEngine checkpoint is a pickle by design (numpy values, HistoryBuffer objects whose
   state holds bound methods, optimizer state), so it no longer loads (mmengine#1655).
   ``load_mmengine_checkpoint`` replaces only that loader (the ``''`` scheme) with one
   that says ``weights_only=False``, as before torch 2.6: those files are the runs' own.
   Third-party weights never take this path: ``trainer.params.pretrained`` is read by
   ``backbone.load_pretrained`` with ``weights_only=True``.
6. ``AmpOptimWrapper`` asserts a GPU: ``optim_wrapper_type`` uses it (fp16; bf16 too in
   the stock loop) or the scaler-free ``AutocastOptimWrapper`` (bf16, trainers/mmseg/speed.py) on CUDA only; a
   CPU rank (the local platform emulating GPUs) trains in fp32 and says so.
7. ``BaseModule.init_weights`` logs one INFO paragraph per parameter (hundreds for
   SwinV2-B) into the job's output: ``quiet_logs`` lifts MMEngine's logger to WARNING.
8. The Runner's ``setup_env`` may set ``OMP_NUM_THREADS``/``MKL_NUM_THREADS`` and OpenCV
   threads: ``keep_threads`` restores the per-rank torch thread count job.py chose.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import sys
import types
from typing import Iterator, Optional

import torch

RUNNER_LAUNCHER = "none"  # trap 2: never let MMEngine initialise torch.distributed
_UNGUARDED_OPS = ("point_sample", "sigmoid_focal_loss")  # module-level `from mmcv.ops import` in mmseg
_APPLIED = False

log = logging.getLogger(__name__)


def stub_mmcv_ops() -> bool:
    """Install the ``mmcv.ops`` stand-in when ``mmcv._ext`` is missing (trap 1); True if installed."""
    if "mmcv.ops" in sys.modules and not getattr(sys.modules["mmcv.ops"], "_campaign_stub", False):
        return False  # the real package is already imported (full mmcv)
    if importlib.util.find_spec("mmcv._ext") is not None:
        return False
    import mmcv

    def _unavailable(name: str):
        def op(*args, **kwargs):
            raise RuntimeError(f"mmcv.ops.{name} needs the full mmcv build (mmcv._ext); "
                               f"mmcv-lite is installed. Install mmcv with its ops to use it.")
        op.__name__ = name
        return op

    ops = types.ModuleType("mmcv.ops", "mmcv-lite stand-in: no compiled ops (trainers/mmseg/compat.py)")
    ops._campaign_stub = True
    for name in _UNGUARDED_OPS:
        setattr(ops, name, _unavailable(name))

    def __getattr__(name: str):
        if name.startswith("__"):  # module introspection (inspect, pickle) expects AttributeError
            raise AttributeError(name)
        # What `from mmcv.ops import X` raises with mmcv-lite: mmseg's guards catch it.
        raise ModuleNotFoundError(f"mmcv.ops.{name} needs the full mmcv build (mmcv._ext)", name="mmcv._ext")

    ops.__getattr__ = __getattr__
    sys.modules["mmcv.ops"] = ops
    mmcv.ops = ops
    return True


def load_mmengine_checkpoint(filename: str, map_location=None):
    """MMEngine's ``load_from_local`` with the pre-2.6 ``weights_only=False`` spelled out (trap 5)."""
    filename = os.path.expanduser(filename)
    if not os.path.isfile(filename):
        raise FileNotFoundError(f"{filename} can not be found.")
    return torch.load(filename, map_location=map_location, weights_only=False)


def _register_checkpoint_loader() -> None:
    from mmengine.runner import CheckpointLoader

    CheckpointLoader.register_scheme(prefixes="", loader=load_mmengine_checkpoint, force=True)


def apply() -> None:
    """Make ``mmseg.models`` importable and MMEngine checkpoints loadable (idempotent)."""
    global _APPLIED
    if _APPLIED:
        return
    stub_mmcv_ops()
    _register_checkpoint_loader()
    from mmseg.utils import register_all_modules

    # mmseg's scope for every registry lookup: nested builds (the data preprocessor, heads,
    # losses) go through MMEngine's root registries and resolve 'mmseg::' names only then.
    register_all_modules(init_default_scope=True)
    import trainers.mmseg.backbone  # noqa: F401  registers SwinV2Timm in mmseg's MODELS
    from trainers.mmseg import speed

    speed.register()  # AutocastOptimWrapper
    _APPLIED = True


def norm_cfg(device: torch.device, world_size: int) -> dict:
    """Decode-head normalisation: SyncBN across NCCL ranks, plain BN otherwise (trap 4)."""
    kind = "SyncBN" if device.type == "cuda" and world_size > 1 else "BN"
    return dict(type=kind, requires_grad=True)


def optim_wrapper_type(device: torch.device, precision: str, stock: bool = False) -> dict:
    """OptimWrapper fields for ``trainer.precision`` on ``device`` (trap 6); ``stock``
    (``trainer.params.loop=stock``): MMSegmentation's own choice, AmpOptimWrapper with its
    dynamic GradScaler for bf16 too."""
    choices = ("fp32", "fp16", "bf16")
    if precision not in choices:
        raise ValueError(f"unknown trainer.precision '{precision}'; available: {', '.join(choices)}")
    if precision == "fp32":
        return dict(type="OptimWrapper")
    if device.type != "cuda":
        log.warning("trainer.precision=%s needs a GPU (AmpOptimWrapper); this CPU rank trains in fp32", precision)
        return dict(type="OptimWrapper")
    if precision == "fp16":
        return dict(type="AmpOptimWrapper", dtype="float16", loss_scale="dynamic")
    if stock:  # what mmseg's AMP configs run, scaler and its per-step inf check included
        return dict(type="AmpOptimWrapper", dtype="bfloat16", loss_scale="dynamic")
    return dict(type="AutocastOptimWrapper", dtype="bfloat16")  # bf16 needs no loss scaling (speed.py)


def wrap_ddp(model: torch.nn.Module, device: torch.device, distributed: bool) -> torch.nn.Module:
    """``model`` on ``device``, in MMDistributedDataParallel when there are several ranks (trap 3)."""
    model = model.to(device)
    if not distributed:
        return model
    from mmengine.model import MMDistributedDataParallel

    return MMDistributedDataParallel(
        module=model,
        device_ids=[device.index] if device.type == "cuda" else None,
        # MMEngine's default broadcast_buffers=False (no buffer sync per forward; SyncBN keeps
        # GPU statistics in step), spelled as torch 2.14 wants it: buffers still sync at init.
        forward_sync_buffers=False,
        find_unused_parameters=False,
    )


@contextlib.contextmanager
def keep_threads(threads: Optional[int] = None) -> Iterator[None]:
    """Restore torch's intra-op thread count after MMEngine's environment set-up (trap 8)."""
    n = threads or torch.get_num_threads()
    try:
        yield
    finally:
        if torch.get_num_threads() != n:
            torch.set_num_threads(n)


@contextlib.contextmanager
def quiet_logs() -> Iterator[None]:
    """MMEngine's current logger at WARNING for the duration (trap 7)."""
    from mmengine.logging import MMLogger

    logger = MMLogger.get_current_instance()
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)
