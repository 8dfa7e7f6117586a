"""Launch-time rules of a trainer's engines (``trainer.params.engine``), read from the
trainer's declaration (``trainers/spec.py``): which engines it implements, which drive
all of a job's GPUs from one process, what the platform and this installation must
offer for each. Imports neither torch nor DeepSpeed (``importlib`` is asked whether a
package could be imported)."""

from __future__ import annotations

import importlib.util
from typing import Any, Mapping

from campaign.errors import ConfigError
from trainers import registry
from trainers.spec import TrainerDef, resolve_params


def trainer_spec(config: Mapping[str, Any]) -> TrainerDef:
    """The declaration of the point's trainer; ``ConfigError`` when there is none."""
    try:
        return registry.spec_of(config["trainer"])
    except registry.UnknownTrainer as exc:
        raise ConfigError(str(exc)) from None


def resolved_params(config: Mapping[str, Any], spec: TrainerDef | None = None) -> dict[str, Any]:
    """``trainer.params`` checked against the declaration and completed with its defaults."""
    spec = spec or trainer_spec(config)
    try:
        return resolve_params(spec, config["trainer"].get("params"))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def engine_of(config: Mapping[str, Any]) -> str | None:
    """The point's engine (the trainer's default when unset); None for trainers without engines."""
    spec = trainer_spec(config)
    if not spec.engines:
        return None
    return str((config["trainer"].get("params") or {}).get("engine") or spec.engines[0])


def single_process_engine(config: Mapping[str, Any]) -> bool:
    """True when the point's job must start ONE task holding all its GPUs
    (resources: tasks_per_node=1, gpus_per_node=gpus)."""
    return engine_of(config) in trainer_spec(config).single_process_engines


def check_engine(config: Mapping[str, Any]) -> None:
    """Refuse an engine the trainer lacks, the platform cannot run, or this installation
    misses, and whatever else the trainer's own rule (``TrainerDef.check``) refuses."""
    spec = trainer_spec(config)
    params = resolved_params(config, spec)
    engine = params.get("engine") if spec.engines else None
    gpus, nodes = config.get("gpus", 1), config.get("nodes", 1)
    platform = config["platform"]
    if engine in spec.single_process_engines:
        if nodes > 1:
            raise ConfigError(f"engine={engine} drives all GPUs from one process on one node; "
                              f"nodes={nodes} needs engine={spec.engines[0]}")
        if platform.get("device") != "cuda" and gpus > 1:
            raise ConfigError(f"engine={engine} splits each batch over CUDA devices in one process; "
                              f"platform={platform['name']} runs on CPU, so use gpus=1 or engine={spec.engines[0]}")
    if spec.check is not None:
        try:
            spec.check({**config, "trainer": {**config["trainer"], "params": params}})
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    # A containerised job imports from its image, not from this Python.
    runs_here = (config.get("container") or {}).get("runtime", "none") == "none"
    if engine in spec.engine_requires and runs_here:
        module, install = spec.engine_requires[engine]
        if importlib.util.find_spec(module) is None:
            raise ConfigError(f"engine={engine} needs {_pretty(module)}, which is not installed; "
                              f"install it with: {install}")


def _pretty(module: str) -> str:
    return {"deepspeed": "DeepSpeed"}.get(module, module)
