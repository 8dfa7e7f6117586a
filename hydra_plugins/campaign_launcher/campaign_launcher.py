"""Hydra launcher plugin ``hydra/launcher=campaign`` (discovered in ``hydra_plugins``).

Kept thin and import-light: plugin discovery imports this module on every Hydra
start. The work is done by ``campaign.launch.launcher``.
"""

from dataclasses import dataclass
from typing import Any, Sequence

from hydra.core.config_store import ConfigStore
from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher


@dataclass
class CampaignLauncherConf:
    _target_: str = "hydra_plugins.campaign_launcher.campaign_launcher.CampaignLauncher"


ConfigStore.instance().store(group="hydra/launcher", name="campaign", node=CampaignLauncherConf, provider="campaign")


class CampaignLauncher(Launcher):
    """Compose and validate every point, register the campaign, submit, return at once."""

    def __init__(self, **_: Any) -> None:
        self.config = None
        self.hydra_context = None
        self.task_function = None

    def setup(self, *, hydra_context: Any, task_function: Any, config: Any) -> None:
        self.config = config
        self.hydra_context = hydra_context
        self.task_function = task_function

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from campaign.launch.launcher import launch_sweep

        return launch_sweep(self, job_overrides, initial_job_idx)


