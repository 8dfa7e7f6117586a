"""Hydra launcher plugin ``hydra/launcher=campaign`` (discovered in ``hydra_plugins``).

Kept thin and import-light: Hydra's plugin scan imports this module on every start of
every Hydra app on the machine. The work is done by ``campaign.launch.launcher``. No
``from __future__ import annotations`` here: the scan runs this module outside
``sys.modules``, where @dataclass could not resolve postponed annotations.
"""

from dataclasses import dataclass, field
from typing import Any, List, Optional, Sequence

from hydra.core.config_store import ConfigStore
from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher


@dataclass
class CampaignLauncherConf:
    _target_: str = "hydra_plugins.campaign_launcher.campaign_launcher.CampaignLauncher"
    # Wait for every point and return its result (true), or return once submitted (false).
    # Unset: wait, unless the sweeper is campaign's (a campaign returns at once by default).
    wait: Optional[bool] = None
    # For apps that are not a campaign (a campaign takes these from its platform):
    executor: str = "local"  # where each point's job runs: local (this machine) or slurm
    timeout_min: int = 60  # wall-clock limit of each job
    nodes: int = 1  # nodes of each job
    tasks_per_node: int = 1  # processes per node, each running the task function
    gpus_per_node: int = 0  # GPUs per node (local: CUDA_VISIBLE_DEVICES)
    cpus_per_task: int = 1  # cores per process
    mem_gb: Optional[float] = None  # host memory per node (slurm)
    partition: Optional[str] = None  # sbatch --partition
    constraint: Optional[str] = None  # sbatch --constraint
    account: Optional[str] = None  # sbatch --account
    qos: Optional[str] = None  # sbatch --qos
    extra_sbatch: List[str] = field(default_factory=list)  # more long sbatch options, e.g. --exclusive
    folder: Optional[str] = None  # submitit's job folder (default: <hydra.sweep.dir>/.campaign)


ConfigStore.instance().store(group="hydra/launcher", name="campaign", node=CampaignLauncherConf, provider="campaign")


class CampaignLauncher(Launcher):
    """A campaign: validate every point, store, submit (and with ``wait``, wait); any
    other app: its task function per point in a submitit job (campaign.launch.launcher)."""

    def __init__(self, **params: Any) -> None:
        self.params = dict(params)
        for key, value in params.items():
            setattr(self, key, value)
        self.config = None
        self.hydra_context = None
        self.task_function = None
        self.last_launch = None  # campaign.launch.run.LaunchResult of the latest campaign launch

    def setup(self, *, hydra_context: Any, task_function: Any, config: Any) -> None:
        self.config = config
        self.hydra_context = hydra_context
        self.task_function = task_function

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from campaign.launch.launcher import launch

        return launch(self, job_overrides, initial_job_idx)
