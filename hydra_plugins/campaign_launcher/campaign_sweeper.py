"""Hydra sweeper ``hydra/sweeper=campaign``: the cartesian product of the sweep overrides,
as Hydra's basic sweeper makes it, without composing every point up front to validate it
and without reading the points' results.

Hydra's BasicSweeper composes each point once to check it and the launcher composes it
again; at 1,000 points that is most of a minute before the first job is submitted. The
campaign launcher composes each distinct combination of config-group choices once,
applies the plain value overrides to a copy, and validates every point itself before
anything is submitted, so the up-front pass is redundant. It also reads each job's
result (``return_value``), which a campaign that returns once submitted does not have:
this sweeper instead asks the launcher's outcome and raises ``LaunchIncomplete`` (exit
status 3) when points were not submitted or failed.

Public Hydra API only (the override parser and ``Override``'s sweep accessors). No
``from __future__ import annotations`` (see campaign_launcher.py).
"""

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.plugins.sweeper import Sweeper


@dataclass
class CampaignSweeperConf:
    _target_: str = "hydra_plugins.campaign_launcher.campaign_sweeper.CampaignSweeper"
    # The sweep a config states (a study preset's grid, conf/study/): key -> values as on
    # the command line ("1,2,4,8"), as Hydra's basic sweeper reads hydra.sweeper.params.
    # The command line's overrides come after them: a key given there replaces the preset's.
    params: Optional[Dict[str, Any]] = None
    # Sub-sweeps whose points are added together (their union, each point once): each is
    # the product of params with its own axes (which replace params' values of the same
    # keys). A study that varies one factor at a time from its defaults (the DataParallel
    # study's section 4) lists one grid per factor, with params holding the defaults.
    grids: Optional[List[Dict[str, Any]]] = None


ConfigStore.instance().store(group="hydra/sweeper", name="campaign", node=CampaignSweeperConf, provider="campaign")


def sweep_points(overrides: List[Any]) -> List[List[str]]:
    """Every point of the sweep (its override lines), in Hydra's basic-sweeper order:
    the cartesian product of each key's values, the keys in the order given."""
    per_key = {}
    for ov in overrides:
        key = ov.get_key_element()
        if ov.is_sweep_override():
            if ov.is_interval_sweep():
                raise ValueError(f"{ov.input_line}: an interval sweep has no points to enumerate; use choice or range")
            per_key[key] = [f"{key}={value}" for value in ov.sweep_string_iterator()]
        else:
            per_key[key] = [f"{key}={ov.get_value_element_as_str()}"]
    return [list(point) for point in itertools.product(*per_key.values())]


def stated_sweep(params: Any) -> List[str]:
    """``hydra.sweeper.params`` as override lines (``gpus=1,2,4,8``), in the order stated;
    ``sweep_points`` keeps a key's first place and its last values, so that the command
    line (after these) narrows or replaces a preset's axis."""
    return [f"{key}={value}" for key, value in (params or {}).items() if value is not None]


def union_points(parser: Any, params: Any, grids: List[Any], arguments: List[str]) -> List[List[str]]:
    """The sweep's points: ``params`` x the command line (``sweep_points``), or, with
    ``grids``, the union of ``params`` x each grid x the command line, in the grids' order,
    a point made by two grids (the same keys and values) kept once."""
    out: List[List[str]] = []
    seen = set()
    for grid in grids or [{}]:
        lines = stated_sweep(params) + stated_sweep(grid) + list(arguments)
        for point in sweep_points(parser.parse_overrides(lines)):
            key = tuple(sorted(point))
            if key not in seen:
                seen.add(key)
                out.append(point)
    return out


class CampaignSweeper(Sweeper):
    # No super() calls: Hydra's plugin scan may execute this module (and Hydra's own
    # plugin modules) a second time, and zero-argument super() then breaks.
    def __init__(self, params: Optional[Dict[str, Any]] = None,
                 grids: Optional[List[Dict[str, Any]]] = None) -> None:
        self.params = dict(params or {})
        self.grids = [dict(g or {}) for g in (grids or [])]
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
        from campaign.launch.sweep import check_record, check_returns, save_multirun_yaml

        from campaign.catalogue.config import is_campaign_config
        from campaign.launch.preflight import writable_here

        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        batch = union_points(parser, self.params, self.grids, list(arguments))
        record = None if _dry_run(self.config) else Path(self.config.hydra.sweep.dir) / "multirun.yaml"
        # a dry run makes nothing, Hydra's record of the sweep included; a campaign's is written
        # once its points are stored (the launcher calls on_stored): a refused or interrupted
        # launch leaves the last sweep's record as it was; another app's, before its jobs go
        kept: list[bool] = []

        def keep() -> None:
            if not kept:
                kept.append(True)
                _keep_record(self.config, record)

        self.launcher.on_stored = None
        if record is not None and is_campaign_config(self.config):
            check_record(record)  # a planted link or FIFO: one line (exit 2), before anything is stored
            writable_here(record.parent, "results_dir's Hydra record folder")  # one line (exit 2), making nothing
            self.launcher.on_stored = keep
        elif record is not None:
            save_multirun_yaml(self.config, record)
            kept.append(True)
        returns = self.launcher.launch(batch, initial_job_idx=0)
        if record is not None:
            keep()  # a launcher that does not call on_stored: after it returned
        check_returns(self.launcher, returns)
        return [returns]


def _keep_record(config: Any, record: Path) -> None:
    """Hydra's record of a campaign's sweep, written once the campaign is stored: a folder
    that cannot take it now is a warning (the campaign is stored and submitted already)."""
    import sys

    from campaign.common.errors import CampaignError
    from campaign.common.text import printable
    from campaign.launch.sweep import save_multirun_yaml

    try:
        save_multirun_yaml(config, record)
    except (CampaignError, OSError) as exc:
        print(f"warning: Hydra's record of the sweep was not written: {printable(str(exc))}", file=sys.stderr)


def _dry_run(config: Any) -> bool:
    """Whether a campaign's sweep is a dry run (``dry_run`` set to a dry-run mode)."""
    from campaign.catalogue.config import is_campaign_config
    from campaign.common.errors import ConfigError
    from campaign.launch.dryrun import dry_run_mode

    if not is_campaign_config(config):
        return False
    try:
        return dry_run_mode(config.get("dry_run")) is not None
    except ConfigError:  # the launch refuses it, saying why
        return False
