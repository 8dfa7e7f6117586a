"""Trainer name -> factory, imported lazily so a job loads only the stack it uses.

A factory is called as ``factory(ctx, cfg, plan)`` with the rank's DistContext, the
point's resolved config (plain dict) and its plan (batch_per_gpu, iterations,
warmup, seed) and returns a trainer object with:

- ``model`` (the possibly DDP-wrapped nn.Module), ``trainable_params`` (int),
  ``images_per_step`` (images this rank processes per iteration);
- ``step(rec) -> loss``: one iteration, calling ``rec.mark(phase)`` as phases end
  (the loop calls ``rec.begin()``/``rec.end()`` around it); or
  ``run(rec, total_iterations)`` for trainers that drive their own loop;
- optionally ``flops_per_iter`` (float) and ``close()``.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

TRAINERS: dict[str, str] = {
    "synthetic": "trainers.synthetic:build",
    "sleep": "trainers.sleep:build",
    "frozen_backbone": "trainers.frozen_backbone:build",
    "vit": "trainers.vit:build",
    "swinv2_upernet": "trainers.mmseg.trainer:build",
}


def get(name: str) -> Callable[..., Any]:
    try:
        target = TRAINERS[name]
    except KeyError:
        raise KeyError(f"unknown trainer '{name}'; available: {', '.join(sorted(TRAINERS))}") from None
    module, attr = target.split(":")
    return getattr(importlib.import_module(module), attr)


def engine_of(params: dict, engines: tuple[str, ...]) -> str:
    """A trainer's ``params.engine``, the first of ``engines`` (its default) when unset;
    refuses one it does not implement (the launch refuses it first: campaign/launch/engines.py)."""
    engine = str(params.get("engine") or engines[0])
    if engine not in engines:
        raise ValueError(f"unknown engine {engine!r}; available: {', '.join(engines)}")
    return engine
