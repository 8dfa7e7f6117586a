"""Launch-time rules of the training engines (``trainer.params.engine``).

Which engines a trainer runs, what the platform and this installation must offer
for each, and how many processes a job of that engine starts. Host side: the
checks read the config and ask ``importlib`` whether a package could be imported;
they import neither torch nor DeepSpeed.
"""

from __future__ import annotations

import importlib.util
from typing import Any, Mapping

from campaign.errors import ConfigError

# trainer -> the engines it implements, default first.
ENGINES: dict[str, tuple[str, ...]] = {
    "frozen_backbone": ("ddp", "dataparallel", "vanilla"),
    "vit": ("ddp", "deepspeed"),
}
# Engines that drive all of a job's GPUs from one process (nn.DataParallel and the
# hand-built trainers.parallel module): one task per job, not one per GPU.
SINGLE_PROCESS = ("dataparallel", "vanilla")
MODES = ("train", "inference")  # frozen_backbone's params.mode
DEEPSPEED_INSTALL = "pip install -c constraints.txt 'campaign[deepspeed]'"


def _params(config: Mapping[str, Any]) -> Mapping[str, Any]:
    return config["trainer"].get("params") or {}


def engine_of(config: Mapping[str, Any]) -> str | None:
    """The point's engine (the trainer's default when unset); None for trainers without engines."""
    name = config["trainer"]["name"]
    if name not in ENGINES:
        return None
    return str(_params(config).get("engine") or ENGINES[name][0])


def single_process_engine(config: Mapping[str, Any]) -> bool:
    """True when the point's job must start ONE task holding all its GPUs
    (resources: tasks_per_node=1, gpus_per_node=gpus)."""
    return engine_of(config) in SINGLE_PROCESS


def check_engine(config: Mapping[str, Any]) -> None:
    """Refuse an engine the trainer lacks, the platform cannot run, or this installation misses."""
    engine = engine_of(config)
    if engine is None:
        return
    trainer = config["trainer"]["name"]
    if engine not in ENGINES[trainer]:
        raise ConfigError(f"unknown trainer.params.engine '{engine}' for trainer={trainer}; "
                          f"available: {', '.join(sorted(ENGINES[trainer]))}")
    gpus, nodes = config.get("gpus", 1), config.get("nodes", 1)
    platform = config["platform"]
    if engine in SINGLE_PROCESS:
        if nodes > 1:
            raise ConfigError(f"engine={engine} drives all GPUs from one process on one node; "
                              f"nodes={nodes} needs engine=ddp")
        if platform.get("device") != "cuda" and gpus > 1:
            raise ConfigError(f"engine={engine} splits each batch over CUDA devices in one process; "
                              f"platform={platform['name']} runs on CPU, so use gpus=1 or engine=ddp")
    mode = str(_params(config).get("mode") or MODES[0])
    if trainer == "frozen_backbone":
        if mode not in MODES:
            raise ConfigError(f"unknown trainer.params.mode '{mode}'; available: {', '.join(MODES)}")
        if mode == "inference" and engine not in SINGLE_PROCESS:
            raise ConfigError(f"mode=inference compares {' and '.join(SINGLE_PROCESS)}; "
                              f"engine={engine} runs mode=train only")
    # A containerised job imports from its image, not from this Python.
    runs_here = (config.get("container") or {}).get("runtime", "none") == "none"
    if engine == "deepspeed" and runs_here and importlib.util.find_spec("deepspeed") is None:
        raise ConfigError(f"engine=deepspeed needs DeepSpeed, which is not installed; "
                          f"install it with: {DEEPSPEED_INSTALL}")
