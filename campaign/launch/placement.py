"""Whether a platform holds a point, and what the point's job asks its scheduler for.

``check_resources`` refuses a point its platform cannot hold (``InfeasiblePoint``: a point of
its own, the sweep runs the rest), ``check_platform`` values no job can run with, and
``plan_resources`` turns the platform and the trainer's engine into the job's ``Resources``.
CPU ranks (``cpu_ranks``) stand in for GPUs on the ``local`` platform.
"""

from __future__ import annotations

import math
from typing import Any

from campaign.backends import EXECUTORS
from campaign.backends.resources import Resources
from campaign.common.errors import ConfigError, InfeasiblePoint
from campaign.launch.validate import CheckedTrainer


def cpu_ranks(platform: dict[str, Any]) -> bool:
    """A platform whose ranks are CPU processes standing in for GPUs (``local``), not this
    machine's GPUs (``local_gpu``) nor a cluster's (``Backend.rank_device``)."""
    from campaign.backends import backend_of

    backend = backend_of(platform["executor"])
    return backend is not None and backend.rank_device(platform) == "cpu"


def _runs_here(platform: dict[str, Any]) -> bool:
    """Whether the platform's jobs run on this machine, one node (``Backend.runs_here``)."""
    from campaign.backends import backend_of

    backend = backend_of(platform["executor"])
    return backend is not None and backend.runs_here


def check_resources(platform: dict[str, Any], gpus: Any, nodes: Any) -> None:
    """Refuse a point the platform cannot hold, saying why and what would."""
    name = platform["name"]
    if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus <= 0:
        raise ConfigError(f"gpus must be a positive integer, got {gpus!r}")
    if not isinstance(nodes, int) or isinstance(nodes, bool) or nodes <= 0:
        raise ConfigError(f"nodes must be a positive integer, got {nodes!r}")
    per_node = int(platform["gpus_per_node"])
    what = "ranks (CPU cores here)" if cpu_ranks(platform) else "GPUs"
    if per_node <= 0 and _runs_here(platform) and not cpu_ranks(platform):
        from campaign.catalogue.gpus import local_gpus

        why = local_gpus().why_none or "no GPU"
        raise InfeasiblePoint(f"{name}: no NVIDIA GPU visible on this machine ({why}); "
                              f"platform=local runs CPU ranks")
    if gpus % nodes:
        # a point of its own, not an error of the sweep: gpus=1,2,4 nodes=1,2 runs the five that divide
        raise InfeasiblePoint(f"gpus={gpus} does not divide over nodes={nodes}; use a multiple of {nodes}")
    if nodes > int(platform.get("max_nodes", 1)):
        raise InfeasiblePoint(f"{name} allows at most {platform.get('max_nodes', 1)} node(s) per job, got nodes={nodes}")
    if gpus // nodes > per_node:
        need = math.ceil(gpus / per_node)
        if _runs_here(platform) or need > int(platform.get("max_nodes", 1)):  # no more nodes to spread over
            raise InfeasiblePoint(f"{name} has {per_node} {what} per node; gpus={gpus} does not fit")
        raise InfeasiblePoint(f"{name} has {per_node} {what} per node; {gpus} needs nodes={need}")


def check_platform(plat: dict[str, Any]) -> None:
    """Refuse platform values no job can run with (the schema checked their types)."""
    if not int(plat.get("time_limit_min") or 0) > 0:
        raise ConfigError(f"platform.time_limit_min must be > 0 (minutes), got {plat.get('time_limit_min')}")
    if not float(plat.get("dist_timeout_min") or 0) > 0:
        raise ConfigError(f"platform.dist_timeout_min must be > 0 (minutes), got {plat.get('dist_timeout_min')}")
    for key in ("cpus_per_task", "mem_per_gpu_gb", "max_submit", "max_running"):
        if plat.get(key) is not None and not plat[key] > 0:
            raise ConfigError(f"platform.{key} must be > 0 when set, got {plat[key]}")
    if plat["executor"] not in EXECUTORS:
        raise ConfigError(f"platform.executor must be one of {', '.join(EXECUTORS)}, got '{plat['executor']}'")


def plan_resources(c: dict[str, Any], trainer: CheckedTrainer) -> Resources:
    """What the point's job asks its scheduler for, from its platform and its trainer's engine."""
    plat = c["platform"]
    per_node = c["gpus"] // c["nodes"]
    if cpu_ranks(plat):
        # A local rank stands for one GPU: one core each (platform.cpus_per_task to change),
        # so the 1-rank baseline does not get the whole machine the N-rank points share.
        cpus_per_task = int(plat.get("cpus_per_task") or 1)
    else:
        cpus_per_task = int(plat.get("cpus_per_task")
                            or max(1, int(plat.get("cpus_per_node") or per_node) // int(plat["gpus_per_node"])))
    tasks_per_node = per_node  # one rank per GPU
    if trainer.single_process:
        # nn.DataParallel / the hand-built module: each process (1; the study's 2) drives all the node's GPUs
        procs = trainer.processes_per_node
        cpus_per_task, tasks_per_node = max(1, cpus_per_task * tasks_per_node // procs), procs
    return Resources(
        nodes=int(c["nodes"]),
        tasks_per_node=tasks_per_node,
        # local: GPUs the job's processes may see (CUDA_VISIBLE_DEVICES); none for CPU ranks
        gpus_per_node=0 if cpu_ranks(plat) else per_node,
        cpus_per_task=cpus_per_task,
        timeout_min=int(plat["time_limit_min"]),
        partition=plat.get("partition"),
        constraint=plat.get("constraint"),
        account=plat.get("account"),
        qos=plat.get("qos"),
        mem_gb=None if not plat.get("mem_per_gpu_gb") else float(plat["mem_per_gpu_gb"]) * per_node,
        extra_sbatch=tuple(plat.get("extra_sbatch") or ()),
        exclusive=bool(plat.get("exclusive", False)),
        max_running=int(plat["max_running"]) if plat.get("max_running") else None,
        checkpoint=bool(c["experiment"].get("checkpoint", False)),
    )
