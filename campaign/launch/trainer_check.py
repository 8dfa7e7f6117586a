"""A point's ``trainer`` section against its trainer's declaration (``trainers/spec.py``),
before anything is stored: the trainer exists, its params are known and well typed
(completed with their defaults), its optimizer, precision, device and engine are ones
it implements. Torch-free: the declarations are."""

from __future__ import annotations

from typing import Any, Mapping

from campaign.errors import ConfigError
from campaign.launch.engines import check_engine, resolved_params, trainer_spec
from trainers import registry


def check_trainer(config: Mapping[str, Any]) -> dict[str, Any]:
    """The point's ``trainer`` section, validated and completed (``module`` and every param
    filled in, so the job reads exactly what was checked); ``ConfigError`` otherwise."""
    spec = trainer_spec(config)
    trainer = dict(config["trainer"])
    for key, allowed in (("optimizer", spec.optimizers), ("precision", spec.precisions)):
        values = [a.value for a in allowed]
        if trainer.get(key) is not None and str(trainer[key]) not in values:
            raise ConfigError(f"trainer={spec.name} does not implement trainer.{key}={trainer[key]}; "
                              f"valid: {', '.join(values)}")
    device = str(config["platform"].get("device"))
    devices = [d.value for d in spec.devices]
    if device not in devices:
        raise ConfigError(f"trainer={spec.name} does not run on platform.device={device} "
                          f"(platform={config['platform']['name']}); valid: {', '.join(devices)}")
    check_engine(config)
    if config.get("experiment", {}).get("checkpoint") and not spec.checkpoint:
        able = ", ".join(n for n in registry.builtin_names() if registry.spec_of(n).checkpoint)
        raise ConfigError(f"trainer={spec.name} cannot resume from a checkpoint (experiment.checkpoint=true); "
                          f"trainers that can: {able}")
    trainer["params"] = resolved_params(config, spec)
    trainer["module"] = registry.module_of(trainer)
    return trainer
