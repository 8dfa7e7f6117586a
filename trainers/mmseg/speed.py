"""What MMEngine adds to a training step that a plain PyTorch loop does not, and how the
trainer leaves it out, so that a campaign times the model, not the framework around it
(``benchmarks/trainer_vs_plain.py`` measures the difference).

1. ``AmpOptimWrapper`` scales the loss with a ``GradScaler`` whatever the dtype; for
   bf16 that buys nothing (bf16 has fp32's range) and costs an unscale pass and the
   scaler's inf check, a host-device synchronisation (``.item()``) every step.
   ``AutocastOptimWrapper``: autocast, no scaler (fp16 keeps AmpOptimWrapper: it needs
   the scaler).
2. MMEngine's ``DefaultOptimWrapperConstructor`` makes one parameter group per
   parameter when ``paramwise_cfg`` is set (no weight decay on norms...): AdamW's
   multi-tensor kernels then run once per parameter, hundreds of launches for SwinV2-B.
   ``merge_param_groups``: groups whose settings are equal become one (same update,
   a few launches), before the schedulers record their learning rates.
3. ``RuntimeInfoHook`` copies every logged value (loss, accuracy per head) to the host
   every iteration (``.item()``: a synchronisation each). ``log_outputs``: the hooks get
   the step's log values only on the iterations the ``LoggerHook`` logs; MMEngine's
   log then shows those iterations' values, not a smoothing of every iteration's (the
   campaign's own loss record is the Recorder's, unaffected).
4. Synthetic data through MMEngine's DataLoader costs, every iteration, packing and
   collating samples, a pageable host-to-device copy and normalisation on the
   device: ``device_batches`` pre-makes a few batches on the device, as a plain loop
   would, and the trainer cycles through them (real datasets keep the loader).

All four are the lean loop's (``trainer.params.loop=lean``, the default). The stock loop
(``trainer.params.loop=stock``, the reference study's) keeps every one of them as
MMSegmentation configures it (AmpOptimWrapper with its scaler for bf16, a group per
parameter, the outputs to the hooks every iteration, every batch through the loader)
and runs MMEngine's own ``IterBasedTrainLoop.run_iter``: nothing here is used.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch

SYNTHETIC_BATCHES = 2  # distinct pre-made batches a synthetic run cycles through
_REGISTERED = False


def register() -> None:
    """Register ``AutocastOptimWrapper`` in MMEngine's OPTIM_WRAPPERS (idempotent)."""
    global _REGISTERED
    if _REGISTERED:
        return
    from mmengine.optim import OptimWrapper
    from mmengine.registry import OPTIM_WRAPPERS

    class AutocastOptimWrapper(OptimWrapper):
        """OptimWrapper whose ``optim_context`` runs the forward under autocast to
        ``dtype`` (``bfloat16``), without loss scaling."""

        def __init__(self, dtype: str = "bfloat16", **kwargs: Any):
            super().__init__(**kwargs)
            self.cast_dtype = getattr(torch, dtype)

        @contextlib.contextmanager
        def optim_context(self, model: torch.nn.Module) -> Iterator[None]:
            from mmengine.runner.amp import autocast

            with super().optim_context(model), autocast(dtype=self.cast_dtype):
                yield

    OPTIM_WRAPPERS.register_module(module=AutocastOptimWrapper, force=True)
    _REGISTERED = True


def _settings(group: dict) -> tuple:
    return tuple(sorted((k, repr(v)) for k, v in group.items() if k != "params"))


def merge_param_groups(optimizer: torch.optim.Optimizer) -> int:
    """Merge parameter groups with equal settings (in place, before any step: the
    optimizer holds no state yet); returns the number of groups left."""
    if optimizer.state:
        raise RuntimeError("merge_param_groups: the optimizer has stepped already")
    merged: dict[tuple, dict] = {}
    for group in optimizer.param_groups:
        key = _settings(group)
        if key in merged:
            merged[key]["params"].extend(group["params"])
        else:
            merged[key] = dict(group, params=list(group["params"]))
    optimizer.param_groups[:] = list(merged.values())
    return len(optimizer.param_groups)


def logs_at(iteration: int, interval: int) -> bool:
    """True where MMEngine's LoggerHook logs after ``iteration`` (0-based): its
    ``every_n_train_iters``."""
    return interval > 0 and (iteration + 1) % interval == 0


def device_batches(loader_iter: Iterator, preprocess, n: int = SYNTHETIC_BATCHES) -> list[tuple[Any, dict]]:
    """``n`` batches from the loader, each with its preprocessed form (on the model's
    device): ``(raw batch, data)`` pairs the step reuses in turn."""
    out = []
    with torch.no_grad():
        for _ in range(n):
            batch = next(loader_iter)
            out.append((batch, preprocess(batch, True)))
    return out
