"""Hydra sweeper ``hydra/sweeper=campaign``: Hydra's basic sweep (cartesian product of
the sweep overrides), without composing every point up front to validate it.

Hydra's BasicSweeper composes each point once to check it and the launcher composes it
again; at 1,000 points that is most of a minute before the first job is submitted. The
campaign launcher composes each distinct combination of config-group choices once,
applies the plain value overrides to a copy, and validates every point itself before
anything is submitted, so the up-front pass is redundant.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Any, List

from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.plugins.sweeper import Sweeper
from omegaconf import OmegaConf


@dataclass
class CampaignSweeperConf:
    _target_: str = "hydra_plugins.campaign_launcher.campaign_sweeper.CampaignSweeper"


ConfigStore.instance().store(group="hydra/sweeper", name="campaign", node=CampaignSweeperConf, provider="campaign")


class CampaignSweeper(Sweeper):
    # No super() calls: Hydra's plugin scan may execute this module (and Hydra's own
    # plugin modules) a second time, and zero-argument super() then breaks.
    def __init__(self) -> None:
        self.config = None
        self.launcher = None
        self.hydra_context = None

    def setup(self, *, hydra_context: Any, task_function: Any, config: Any) -> None:
        from hydra.core.plugins import Plugins

        self.config = config
        self.hydra_context = hydra_context
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )

    def sweep(self, arguments: List[str]) -> Any:
        from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        (batch,) = BasicSweeper.split_arguments(parser.parse_overrides(list(arguments)), None)
        sweep_dir = Path(self.config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        return [self.launcher.launch(batch, initial_job_idx=0)]


