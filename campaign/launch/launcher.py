"""The campaign launcher: a Hydra sweep becomes a campaign of jobs.

Unlike Hydra's submitit launcher it gives every point its own resources, refuses
the whole sweep before anything is submitted if any point is invalid, and returns
without waiting for the jobs.
"""

from __future__ import annotations

import sys
from typing import Any, Sequence

from hydra.core.utils import JobReturn, JobStatus
from omegaconf import DictConfig, OmegaConf

from campaign.errors import CampaignError, ConfigError, InfeasiblePoint
from campaign.launch.plan import PointPlan, plan_point
from campaign.launch.report import print_dry_run, print_submitted


def compose_points(launcher: Any, job_overrides: Sequence[Sequence[str]],
                   initial_job_idx: int) -> tuple[list[PointPlan], list[str]]:
    """Compose, resolve and validate every point (and its repeats).

    Returns the points to submit and the points left out because their platform
    cannot hold them (each with its reason). Any other invalid point refuses the
    whole sweep, as does a sweep in which no point fits.
    """
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from campaign.launch.compose import PointComposer
    from campaign.launch.hydra_errors import as_config_error

    composer = PointComposer(launcher.hydra_context.config_loader, launcher.config)
    points: list[PointPlan] = []
    errors: list[str] = []
    refused: list[str] = []
    idx = 0
    for overrides in job_overrides:
        overrides = list(overrides)
        where = " ".join(overrides) or "(defaults)"
        try:
            cfg = composer.compose(overrides)
        except (HydraException, OmegaConfBaseException, ValueError, ConfigError) as exc:
            errors.append(f"point {where}: {as_config_error(exc)}")
            continue
        repeats = cfg.get("repeats", 1)
        if not isinstance(repeats, int) or repeats < 1:
            raise ConfigError(f"repeats must be a positive integer, got {repeats!r}")
        for r in range(repeats):
            try:
                points.append(plan_point(cfg, initial_job_idx + idx, overrides, repeat=r))
            except InfeasiblePoint as exc:
                refused.append(f"point {where}: {exc}")
                break
            except ConfigError as exc:
                errors.append(f"point {where}: {exc}")
                break
            idx += 1
    if errors:
        more = f" (and {len(errors) - 1} more invalid point(s); nothing was submitted)" if len(errors) > 1 else ""
        raise ConfigError(errors[0] + more)
    if not points:
        more = f" (and {len(refused) - 1} more point(s) that do not fit)" if len(refused) > 1 else ""
        raise InfeasiblePoint(refused[0] + more)
    return points, refused


def preflight(points: Sequence[PointPlan]) -> None:
    """Launch-time checks that need the file system: datasets, container images."""
    from campaign.store.store import check_store_url

    for url in sorted({str(p.config["store"]["url"]) for p in points}):
        check_store_url(url)
    from campaign.container import check_container
    from campaign.datasets import check_dataset

    seen: set = set()
    for p in points:
        for check, section in ((check_dataset, p.config["dataset"]), (check_container, p.config["container"])):
            key = (check.__name__, repr(sorted(section.items(), key=str)))
            if key not in seen:
                seen.add(key)
                check(OmegaConf.create(section))


def launch_sweep(launcher: Any, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> list[JobReturn]:
    """Body of CampaignLauncher.launch; CampaignErrors end the process with exit 2."""
    from campaign.cli import fail

    base: DictConfig = launcher.config
    try:
        points, refused = compose_points(launcher, job_overrides, initial_job_idx)
        preflight(points)
        for line in refused:
            print(f"refused: {line}", file=sys.stderr)
        if base.get("dry_run"):
            print_dry_run(points)
            campaign_id = None
        else:
            from campaign.launch.submit import register_and_submit

            campaign_id, submitted = register_and_submit(
                points,
                store_url=str(base.store.url),
                results_dir=str(base.results_dir),
                name=base.get("name"),
                overrides=[a for a in sys.argv[1:] if a not in ("-m", "--multirun")],
                python=_container_python(points),
            )
            print_submitted(campaign_id, points, submitted, base)
    except CampaignError as exc:
        fail(exc)
    returns = []
    for p in points:
        ret = JobReturn(overrides=p.overrides, status=JobStatus.COMPLETED)
        ret.return_value = campaign_id
        returns.append(ret)
    return returns


def _container_python(points: Sequence[PointPlan]):
    """The job interpreter for a containerised campaign (None: the host's Python)."""
    runtimes = {p.config["container"]["runtime"] for p in points}
    if runtimes == {"none"}:
        return None
    if len({repr(p.config["container"]) for p in points}) > 1:
        raise ConfigError("one campaign runs in one container; do not sweep container settings")
    from campaign.container import container_python, job_binds

    p = points[0]
    binds = job_binds(
        data_dirs=sorted({q.config["dataset"]["root"] for q in points if q.config["dataset"].get("root")}),
        results_dir=p.config["results_dir"],
        code_dir=None,
        extra=list(p.config["container"].get("binds") or []),
    )
    gpu = any(q.config["platform"]["device"] == "cuda" for q in points)
    return container_python(OmegaConf.create(p.config["container"]), binds=binds, gpu=gpu)
