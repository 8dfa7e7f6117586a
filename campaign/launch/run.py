"""A campaign's planned points -> checked, stored, submitted (and, with ``wait``, waited
for) -> one Hydra ``JobReturn`` per point that tells the truth about it.

The same path serves a sweep (``-m``, through the launcher plugin) and the foreground
point (no ``-m``, ``run_single`` below). What a point's ``JobReturn`` says:

=================================  ======================================================
the point                          ``JobReturn``
=================================  ======================================================
submitted, not waited for          status UNKNOWN (its result is not known yet)
not submitted (scheduler refused)  status FAILED, ``PointFailed`` (``submitted=False``)
waited for, completed              status COMPLETED, rank 0's return value
waited for, failed                 status FAILED, ``PointFailed`` with the point's reason
dry run                            status UNKNOWN
=================================  ======================================================

``check_outcome`` turns FAILED points into one ``LaunchIncomplete`` (exit status 3)
naming them and the command that retries them.
"""

from __future__ import annotations

import shlex
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

from hydra.core.utils import JobReturn, JobStatus
from omegaconf import DictConfig, OmegaConf

from campaign.backends import Submitted
from campaign.common.errors import InfeasiblePoint, Interrupted, LaunchIncomplete, PointFailed, one_line
from campaign.launch.plan import PointPlan
from campaign.common.redact import redact

if TYPE_CHECKING:
    from campaign.launch.launchplan import LaunchPlan

POLL_S = 0.5  # how often a waiting launch asks whether its jobs ended
SHOWN = 3  # points named in one error line before "and N more"


@dataclass
class LaunchResult:
    """What one launch did: the campaign it stored (None for a dry run), its points, what
    their scheduler said, and one ``JobReturn`` per point."""

    campaign_id: Optional[str]
    points: list[PointPlan]
    store_url: str
    results_dir: str
    multirun: bool
    submitted: list[Submitted] = field(default_factory=list)
    returns: list[JobReturn] = field(default_factory=list)
    failures: list[PointFailed] = field(default_factory=list)


def launch_campaign(points: Sequence[PointPlan], base: Any, *, sweep_overrides: Sequence[str], multirun: bool,
                    wait: bool, on_stored: Optional[Callable[[], None]] = None) -> LaunchResult:
    """Plan the points once (campaign/launch/launchplan.py ``make_plan``: checks, cost,
    preflight), then print the plan (a dry run; with ``--save-plan``, saved too) or store
    and submit it (``send_plan``), waiting with ``wait``; ``on_stored`` is called once they
    are stored and submitted (the sweeper's record).

    ``base`` is the launch's composed config (Hydra's node, if any, gives the returns'
    ``hydra_cfg`` and task name). Raises ``CampaignError`` before anything is stored when
    a point cannot run; returns the ``LaunchResult`` once it is stored and submitted.
    """
    from campaign.launch.launchplan import make_plan

    plan = make_plan(points, sweep_overrides=sweep_overrides, multirun=multirun)
    hydra_cfg = OmegaConf.create({"hydra": base.hydra}) if OmegaConf.is_config(base) and "hydra" in base else None
    if plan.dry is None:
        return send_plan(plan, hydra_cfg=hydra_cfg, wait=wait, on_stored=on_stored)
    from campaign.common.text import printable
    from campaign.launch.dryrun import print_dry_run
    from campaign.launch.savedplan import save_requested

    print_dry_run(plan)
    for line in plan.writes:  # after the table (on stderr beside --json's lines, as its notes)
        print(f"note: {printable(line)}", file=sys.stderr if plan.dry == "json" else sys.stdout)
    save_requested(plan)  # --save-plan FILE: the plan kept for campaign submit
    result = LaunchResult(None, list(plan.points), plan.store_url, plan.results_dir, multirun)
    task = task_name(hydra_cfg)
    result.returns = [_job_return(p, hydra_cfg, task, JobStatus.UNKNOWN) for p in plan.points]
    return result


def send_plan(plan: "LaunchPlan", *, hydra_cfg: Any = None, wait: bool = False,
              on_stored: Optional[Callable[[], None]] = None, origin: str = "") -> LaunchResult:
    """Register and submit exactly ``plan``'s points, print what was submitted, wait with
    ``wait``; ``origin`` (`` # from plan sha256:...``) is recorded after its command line."""
    from campaign.common.text import printable
    from campaign.launch.report import print_submitted
    from campaign.launch.submit import register_and_submit

    points = list(plan.points)
    result = LaunchResult(None, points, plan.store_url, plan.results_dir, plan.multirun)
    for line in plan.said:  # what the command line did to the study's design, before it is stored
        print(printable(line), file=sys.stderr)
    result.campaign_id, result.submitted = register_and_submit(
        points, store_url=result.store_url, results_dir=result.results_dir, name=plan.name,
        overrides=list(plan.sweep_overrides), command=plan.command + origin, python=plan.job_python(),
    )
    if on_stored is not None:
        on_stored()
    try:
        print_submitted(result.campaign_id, points, result.submitted, store_option(result), multirun=plan.multirun,
                        cost=plan.cost)
        if wait:
            wait_for_campaign(result)
    except KeyboardInterrupt:
        cid, store = result.campaign_id, store_option(result)
        raise Interrupted(f"interrupted; campaign {cid} was stored and submitted: campaign status {cid}{store} "
                          f"shows what its points did, campaign cancel {cid}{store} stops those still running") from None
    job_returns(result, hydra_cfg, waited=wait)
    return result


def store_option(result: LaunchResult) -> str:
    """`` --store URL`` for the follow-up commands, or "" for the default store (redacted:
    a URL with a password is to be given again, or through $CAMPAIGN_STORE)."""
    default = f"sqlite:///{result.results_dir}/campaign.db"
    url = result.store_url
    if url in (default, f"sqlite:///{result.results_dir.rstrip('/')}/campaign.db"):
        return ""
    return f" --store {shlex.quote(redact(url))}"


def wait_for(submitted: Sequence[Submitted]) -> None:
    """Block until every submitted job has ended (Ctrl-C raises KeyboardInterrupt)."""
    for s in submitted:
        job = s.handle()
        while job is not None and not job.done():
            time.sleep(POLL_S)


def wait_for_campaign(result: LaunchResult) -> None:
    """Block until every point has ended, submitting meanwhile what the campaign has due
    (campaign/launch/resume.py ``submit_due``: the next wave as room frees, automatic
    retries within ``max_retries``); each point's ``Submitted`` is its latest submission."""
    from campaign.launch.resume import submit_due

    while True:
        wait_for(result.submitted)
        done = submit_due(result.store_url, result.campaign_id) if result.campaign_id else []
        index = {s.point_id: i for i, s in enumerate(result.submitted)}
        for out in done:
            for s in out.submitted:
                if s.job_id or not result.submitted[index[s.point_id]].job_id:
                    result.submitted[index[s.point_id]] = s
        if not done:  # nothing waits, nothing to retry: every point has ended
            return
        if not any(s.job_id for out in done for s in out.submitted):
            time.sleep(POLL_S * 4)  # no room yet: jobs (maybe others') must end first


class PointReturn(JobReturn):
    """A campaign point's ``JobReturn``; its ``cfg`` (the point's config as a DictConfig) is
    made when first read: a 1,000-point sweep that returns at once would spend seconds
    building configs nobody reads."""

    @property  # type: ignore[override]
    def cfg(self) -> Any:
        if getattr(self, "_cfg", None) is None and getattr(self, "_config", None) is not None:
            self._cfg = OmegaConf.create(self._config)
        return getattr(self, "_cfg", None)

    @cfg.setter
    def cfg(self, value: Any) -> None:
        self._cfg = value


def task_name(hydra_cfg: Any) -> str:
    """Hydra's job name, the task name of every point's ``JobReturn`` (looked up once a
    launch, not once a point)."""
    return str(OmegaConf.select(hydra_cfg, "hydra.job.name", default="campaign")) if hydra_cfg else "campaign"


def _job_return(p: PointPlan, hydra_cfg: Any, task: str, status: JobStatus, value: Any = None,
                working_dir: Optional[str] = None) -> JobReturn:
    ret = PointReturn(overrides=list(p.overrides), hydra_cfg=hydra_cfg, working_dir=working_dir, task_name=task,
                      status=status)
    ret._config = p.config
    if status is not JobStatus.UNKNOWN:
        ret.return_value = value
    return ret


def _reasons(result: LaunchResult) -> dict[int, Optional[str]]:
    """The store's reason per point id (what `campaign status` shows), {} if unreadable."""
    from campaign.common.errors import CampaignError
    from campaign.launch.submit import absolute_store_url
    from campaign.store import open_store

    try:
        with open_store(absolute_store_url(result.store_url)) as store:
            return {r["id"]: (r.get("attempt_reason") or r.get("reason")) for r in store.points(result.campaign_id)}
    except CampaignError:
        return {}


def job_returns(result: LaunchResult, hydra_cfg: Any, *, waited: bool) -> None:
    """Fill ``result.returns`` (one per point, the table in the module docstring) and
    ``result.failures``; with ``waited`` each job has ended and its outcome is read."""
    from campaign.backends.joblogs import last_exception

    reasons = _reasons(result) if waited else {}
    task = task_name(hydra_cfg)
    for p, s in zip(result.points, result.submitted):
        where = dict(campaign_id=result.campaign_id, idx=p.idx, overrides=p.overrides)
        if s.job_id is None and s.waiting:  # held back for room: not submitted yet, not failed
            result.returns.append(_job_return(p, hydra_cfg, task, JobStatus.UNKNOWN))
        elif s.job_id is None:
            exc = PointFailed(f"#{p.idx} {p.label()}: not submitted: {s.error}", submitted=False, **where)
            result.failures.append(exc)
            result.returns.append(_job_return(p, hydra_cfg, task, JobStatus.FAILED, exc, s.job_folder))
        elif not waited:
            result.returns.append(_job_return(p, hydra_cfg, task, JobStatus.UNKNOWN, working_dir=s.job_folder))
        else:
            job = s.handle()
            error = job.exception() if job is not None else None
            if error is None:
                value = job.results()[0] if job is not None else None
                result.returns.append(_job_return(p, hydra_cfg, task, JobStatus.COMPLETED, value, s.job_folder))
                continue
            text = str(error)
            lines = [ln for ln in text.strip().splitlines() if ln.strip()]
            reason = reasons.get(s.point_id) or last_exception(text) or (one_line(lines[-1]) if lines else "failed")
            exc = PointFailed(f"#{p.idx} {p.label()}: {redact(reason)}", submitted=True, **where)
            exc.__cause__ = error
            result.failures.append(exc)
            result.returns.append(_job_return(p, hydra_cfg, task, JobStatus.FAILED, exc, s.job_folder))


def _named(failures: Sequence[PointFailed]) -> str:
    shown = "; ".join(str(f) for f in failures[:SHOWN])
    return shown + (f"; and {len(failures) - SHOWN} more" if len(failures) > SHOWN else "")


def check_outcome(result: LaunchResult) -> None:
    """Raise ``LaunchIncomplete`` (exit 3) when a point was not submitted or failed: one
    line naming them, where to look, and the command that retries them."""
    if not result.failures:
        return
    total, cid, store = len(result.points), result.campaign_id, store_option(result)
    unsent = [f for f in result.failures if not f.submitted]
    failed = [f for f in result.failures if f.submitted]
    parts = []
    if unsent:
        what = f"none of its {total} point(s) was" if len(unsent) == total else f"{len(unsent)} of {total} point(s) were not"
        parts.append(f"{what} submitted ({_named(unsent)}); once the cause is fixed, "
                     f"submit them with: campaign resume {cid}{store}")
    if failed:
        if len(failed) == 1:
            again = shlex.join(["campaign", "launch", *(["-m"] if result.multirun else []), *failed[0].overrides])
        else:
            again = "campaign launch -m OVERRIDES (each point's are listed by campaign status)"
        parts.append(f"{len(failed)} of {total} point(s) failed ({_named(failed)}); "
                     f"details: campaign status {cid}{store}; rerun with: campaign resume {cid}{store} "
                     f"(or a new campaign: {redact(again)})")
    raise LaunchIncomplete(f"campaign {cid}: " + "; ".join(parts))


def run_single(cfg: DictConfig) -> LaunchResult:
    """The task function of campaign's app without ``-m``: the point of ``cfg`` (and its
    repeats) planned, stored and submitted as a sweep's point is, then waited for; its
    status is printed at the end.

    Raises ``CampaignError`` when the point is refused (nothing stored, exit 2) and
    ``LaunchIncomplete`` when it was stored but not submitted or failed (exit 3).
    """
    from hydra.core.hydra_config import HydraConfig

    from campaign.launch.plan import leave_out_unplaceable, plan_point
    from campaign.launch.submit import absolute_store_url

    overrides = list(HydraConfig.get().overrides.task)  # what Hydra composed this point from
    points = [plan_point(cfg, r, overrides, repeat=r) for r in range(max(1, int(cfg.repeats)))]
    points, unplaceable = leave_out_unplaceable(points)  # the cluster's own limits (SLURM: nodes per partition)
    if unplaceable:
        raise InfeasiblePoint(unplaceable[0])
    result = launch_campaign(points, cfg, sweep_overrides=overrides, multirun=False, wait=True)
    if result.campaign_id and any(s.job_id for s in result.submitted):
        from campaign.observe.status import show_status

        show_status(result.campaign_id, store_url=absolute_store_url(result.store_url))  # the table, for the user
    check_outcome(result)
    return result
