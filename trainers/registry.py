"""The trainer registry: a point's ``trainer`` section -> its declaration -> its factory.

One registry for the launch and the job. A trainer is found through the module that
declares it (``TRAINER = TrainerDef(...)``, ``trainers/spec.py``): ``trainer.module``
when its conf file names one (a site's trainer), else ``trainers.specs.<name>`` (the
built-ins). The declaration is torch-free; its ``build`` target (imported only in the
job) is called as ``factory(ctx, cfg, plan)`` with the rank's DistContext, the point's
resolved config (plain dict) and its plan (batch_per_gpu, iterations, warmup, seed) and
returns a trainer object with:

- ``model`` (the possibly DDP-wrapped nn.Module), ``trainable_params`` (int),
  ``images_per_step`` (images this rank processes per iteration);
- ``step(rec) -> loss``: one iteration, calling ``rec.mark(phase)`` as phases end
  (the loop calls ``rec.begin()``/``rec.end()`` around it); or
  ``run(rec, total_iterations)`` for trainers that drive their own loop;
- optionally ``flops_per_iter`` (float) and ``close()``.

Stdlib only (no torch): ``campaign`` imports it to validate points.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any, Callable, Mapping, Union

from trainers.spec import TrainerDef, did_you_mean

BUILTIN = "trainers.specs"  # package of the built-in declarations, one module per trainer


class UnknownTrainer(LookupError):
    """No declaration for the trainer a config names (message: one line with the choices)."""

    def __str__(self) -> str:  # KeyError-like classes would quote the message
        return str(self.args[0]) if self.args else "unknown trainer"


def builtin_names() -> list[str]:
    """The built-in trainers' names (the modules of ``trainers.specs``)."""
    package = importlib.import_module(BUILTIN)
    return sorted(m.name for m in pkgutil.iter_modules(package.__path__) if not m.name.startswith("_"))


def module_of(trainer: Mapping[str, Any]) -> str:
    """The module declaring the trainer of a ``trainer`` config section."""
    return str(trainer.get("module") or f"{BUILTIN}.{trainer['name']}")


def spec_of(trainer: Union[str, Mapping[str, Any]]) -> TrainerDef:
    """The declaration of a trainer, from its ``trainer`` config section (or a built-in's name).

    Raises ``UnknownTrainer`` (one line, the built-in names and the nearest) when the module
    cannot be imported or declares no ``TRAINER`` of that name.
    """
    section = {"name": trainer} if isinstance(trainer, str) else trainer
    name, module = str(section["name"]), module_of(section)
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        missing = str(exc.name or "")
        if missing != module and not module.startswith(missing + "."):  # it exists; something it imports does not
            raise UnknownTrainer(f"trainer {name!r}: importing its module {module!r} failed: {exc}") from None
        if section.get("module"):
            raise UnknownTrainer(f"trainer {name!r}: its module {module!r} cannot be imported ({exc}); "
                                 "put it on PYTHONPATH or install it") from None
        names = builtin_names()
        raise UnknownTrainer(f"unknown trainer {name!r}{did_you_mean(name, names)}; available: {', '.join(names)} "
                             "(or a conf file of your own naming its module: trainer.module)") from None
    spec = getattr(mod, "TRAINER", None)
    if not isinstance(spec, TrainerDef):
        raise UnknownTrainer(f"trainer {name!r}: module {module!r} declares no TRAINER = TrainerDef(...)")
    if spec.name != name:
        raise UnknownTrainer(f"trainer.name={name!r} but module {module!r} declares trainer {spec.name!r}; "
                             f"pick a trainer with trainer=NAME, not trainer.name=NAME")
    return spec


def get(trainer: Union[str, Mapping[str, Any]]) -> Callable[..., Any]:
    """The factory of a trainer (imports its implementation, and with it torch)."""
    module, _, attr = spec_of(trainer).build.partition(":")
    return getattr(importlib.import_module(module), attr)


def engine_of(params: dict, engines: tuple[str, ...]) -> str:
    """A trainer's ``params.engine``, the first of ``engines`` (its default) when unset;
    refuses one it does not implement (the launch refuses it first, from the declaration)."""
    engine = str(params.get("engine") or engines[0])
    if engine not in engines:
        raise ValueError(f"unknown engine {engine!r}; available: {', '.join(engines)}")
    return engine


def shares_devices(trainer: Mapping[str, Any]) -> bool:
    """Whether each process of the point's job drives all the job's GPUs: its engine is one
    of its trainer's single-process engines (one process a node, or ``procs_per_node`` of
    them: trainers/dist.py puts them on one GPU and gloo)."""
    spec = spec_of(trainer)
    if not spec.single_process_engines:
        return False
    return engine_of(dict(trainer.get("params") or {}), spec.engines) in spec.single_process_engines
