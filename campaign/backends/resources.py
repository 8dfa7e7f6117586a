"""What one point's job asks its scheduler for: the typed boundary from a platform
(``PlatformSpec``, planned by ``campaign/launch/plan.py``) to a backend (sbatch
parameters, a local executor's processes)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Resources:
    nodes: int  # nodes the job spans
    tasks_per_node: int  # processes per node: one per rank (1 for a single-process engine)
    gpus_per_node: int  # GPUs per node the job holds (local: CUDA_VISIBLE_DEVICES); 0 for CPU ranks
    cpus_per_task: int  # cores per process
    timeout_min: int  # wall-clock limit (minutes, > 0)
    partition: Optional[str] = None  # sbatch --partition
    constraint: Optional[str] = None  # sbatch --constraint (node features)
    account: Optional[str] = None  # sbatch --account
    qos: Optional[str] = None  # sbatch --qos
    mem_gb: Optional[float] = None  # host memory per node (sbatch --mem); None: the partition's default
    extra_sbatch: tuple[str, ...] = ()  # extra long options, e.g. ("--exclusive",)
    exclusive: bool = False  # local: one job at a time on this machine (a file lock)
    max_running: Optional[int] = None  # SLURM: tasks of one job array running at once (--array=...%k)
    checkpoint: bool = False  # the job checkpoints and requeues itself before its time limit

    def __post_init__(self) -> None:
        for name in ("nodes", "tasks_per_node", "cpus_per_task", "timeout_min"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"Resources.{name} must be a positive integer, got {value!r}")
        if isinstance(self.gpus_per_node, bool) or not isinstance(self.gpus_per_node, int) or self.gpus_per_node < 0:
            raise ValueError(f"Resources.gpus_per_node must be an integer >= 0, got {self.gpus_per_node!r}")
        object.__setattr__(self, "extra_sbatch", tuple(self.extra_sbatch or ()))

    @property
    def tasks(self) -> int:
        """Processes of the whole job."""
        return self.nodes * self.tasks_per_node
