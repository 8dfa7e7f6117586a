"""A point in the foreground (``campaign launch`` without ``-m``): planned, stored and
submitted as a sweep's point is, then waited for; its status is printed at the end."""

from __future__ import annotations

from omegaconf import DictConfig

from campaign.launch.run import LaunchResult


def run_single(cfg: DictConfig) -> LaunchResult:
    """The task function of campaign's app: run the point of ``cfg`` (and its repeats).

    Raises ``CampaignError`` when the point is refused (nothing stored, exit 2) and
    ``LaunchIncomplete`` when it was stored but not submitted or failed (exit 3).
    """
    from hydra.core.hydra_config import HydraConfig

    from campaign.launch.plan import plan_point
    from campaign.launch.run import check_outcome, launch_campaign
    from campaign.launch.submit import absolute_store_url

    overrides = list(HydraConfig.get().overrides.task)  # what Hydra composed this point from
    points = [plan_point(cfg, r, overrides, repeat=r) for r in range(max(1, int(cfg.repeats)))]
    result = launch_campaign(points, cfg, sweep_overrides=overrides, multirun=False, wait=True)
    if result.campaign_id and any(s.job_id for s in result.submitted):
        from campaign.status import show_status

        show_status(result.campaign_id, store_url=absolute_store_url(result.store_url))  # the table, for the user
    check_outcome(result)
    return result
