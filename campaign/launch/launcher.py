"""The body of the ``hydra/launcher=campaign`` plugin.

Two kinds of app reach it:

- **a campaign** (campaign's own app, or any app whose config is a ``CampaignConfig``):
  every point is composed, validated and planned (its own resources from its platform)
  before anything is stored; then the campaign is registered and its points submitted
  as trainer jobs (``campaign/launch/run.py``). By default it returns at once;
- **any other Hydra app**: each point runs the app's task function with Hydra's
  ``run_job`` semantics, as a submitit job on this machine or on SLURM
  (``campaign/launch/generic.py``, resources from ``hydra.launcher.*``).

``hydra.launcher.wait`` says whether the launch waits for the points: true returns each
point's real result (a FAILED ``JobReturn`` with the exception for a point that
failed), false returns once submitted (an UNKNOWN ``JobReturn`` per submitted point,
FAILED for one that could not be submitted). Unset, it waits unless the sweeper is
campaign's, the one sweeper that does not read every result. Errors are raised, never
turned into exit codes here: that is the CLI's job.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Optional, Sequence

from omegaconf import OmegaConf

from campaign.catalogue.config import is_campaign_config
from campaign.common.errors import ConfigError, InfeasiblePoint

if TYPE_CHECKING:
    from campaign.launch.plan import PointPlan


def uses_campaign_sweeper(config: Any) -> bool:
    """Whether the sweep is driven by campaign's sweeper (which reads no job's result)."""
    return str(OmegaConf.select(config, "hydra.sweeper._target_", default="")).endswith(".CampaignSweeper")


def resolve_wait(wait: Optional[bool], config: Any) -> bool:
    """``hydra.launcher.wait``, its default applied; refuses a combination Hydra cannot run."""
    campaign_sweeper = uses_campaign_sweeper(config)
    if wait is None:
        return not campaign_sweeper
    if not wait and not campaign_sweeper:
        sweeper = OmegaConf.select(config, "hydra.sweeper._target_", default="?")
        raise ConfigError(f"hydra.launcher.wait=false returns before the points end, but the sweeper "
                          f"({sweeper}) reads every point's result; use hydra/sweeper=campaign or wait=true")
    return bool(wait)


def launch(launcher: Any, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> list:
    """``CampaignLauncher.launch``: a campaign, or any other app's jobs (module docstring)."""
    wait = resolve_wait(getattr(launcher, "wait", None), launcher.config)
    if is_campaign_config(launcher.config):
        from campaign.launch.run import launch_campaign

        points, refused = compose_points(launcher, job_overrides, initial_job_idx)
        from campaign.common.text import shown

        for line in refused:  # names the point by its overrides: a store URL's password among them
            print(f"refused: {shown(line)}", file=sys.stderr)
        task = launcher.config.hydra.overrides.task  # the sweep as given, from Hydra (not sys.argv)
        launcher.last_launch = launch_campaign(points, launcher.config, sweep_overrides=list(task), multirun=True,
                                               wait=wait, on_stored=getattr(launcher, "on_stored", None))
        return launcher.last_launch.returns
    from campaign.launch.generic import launch_app

    return launch_app(launcher, job_overrides, initial_job_idx, wait=wait)


def compose_points(launcher: Any, job_overrides: Sequence[Sequence[str]],
                   initial_job_idx: int) -> tuple[list[PointPlan], list[str]]:
    """Compose, resolve and validate every point (and its repeats).

    Returns the points to submit and the points left out because their platform
    cannot hold them (each with its reason). Any other invalid point refuses the
    whole sweep, as does a sweep in which no point fits.
    """
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    # a campaign's planning, imported here: any other Hydra app's launch (and each of its
    # jobs, which unpickle their task through this module's neighbours) never needs it
    from campaign.launch.compose import PointComposer
    from campaign.launch.hydra_errors import as_config_error
    from campaign.launch.plan import leave_out_unplaceable, plan_point, point_where
    from campaign.launch.planmemo import PlanMemo
    from campaign.launch.validate import check_point_count

    composer = PointComposer(launcher.hydra_context.config_loader, launcher.config)
    memo = PlanMemo()  # each class of points planned once (campaign/launch/planmemo.py)
    points: list[PointPlan] = []
    errors: list[str] = []
    refused: list[str] = []
    idx = 0
    check_point_count(len(job_overrides), launcher.config)  # before composing any (max_points)
    typed = [str(o) for o in launcher.config.hydra.overrides.task] if "hydra" in launcher.config else None
    for overrides in job_overrides:
        overrides = list(overrides)
        where = point_where(overrides)
        try:
            cfg, fingerprints = composer.compose_shared(overrides)  # sections shared: planned, never changed
        except (HydraException, OmegaConfBaseException, ValueError, ConfigError) as exc:
            errors.append(f"point {where}: {as_config_error(exc)}")
            continue
        repeats = cfg.get("repeats", 1)
        if not isinstance(repeats, int) or repeats < 1:
            raise ConfigError(f"repeats must be a positive integer, got {repeats!r}")
        for r in range(repeats):
            try:
                points.append(plan_point(cfg, initial_job_idx + idx, overrides, repeat=r, typed=typed,
                                         memo=memo, fingerprints=fingerprints))
            except InfeasiblePoint as exc:
                refused.append(f"point {where}: {exc}")
                break
            except ConfigError as exc:
                errors.append(f"point {where}: {exc}")
                break
            idx += 1
        check_point_count(idx, cfg)  # repeats included (each within max_repeats: plan_point)
    if errors:
        more = f" (and {len(errors) - 1} more invalid point(s); nothing was submitted)" if len(errors) > 1 else ""
        raise ConfigError(errors[0] + more)
    points, unplaceable = leave_out_unplaceable(points)  # the cluster's own limits (SLURM: nodes per partition)
    refused += unplaceable
    if not points:
        more = f" (and {len(refused) - 1} more point(s) that do not fit)" if len(refused) > 1 else ""
        raise InfeasiblePoint(refused[0] + more)
    return points, refused
