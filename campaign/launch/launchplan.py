"""A launch as one immutable plan: made once from the sweep's points and what the site
answers, then printed (a dry run) or registered and submitted (a launch, ``campaign submit``).

``make_plan`` is the one function that works a launch out: which keys the command line set
and what that did to a study's design, what it will cost (over ``max_gpu_hours``: refused),
the time limits, the preflight (store, folders, scheduler, datasets, weights), the job
interpreter and the command line the store records. Nothing downstream works any of it out
again: ``print_dry_run`` prints a ``LaunchPlan``, ``send_plan`` (campaign/launch/run.py)
stores and submits one.

``to_json``/``from_json``: the plan as plain JSON (never pickle), every field written and
read, so that a saved plan (campaign/launch/savedplan.py) is submitted exactly as reviewed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Optional, Sequence

from campaign.backends.resources import Resources
from campaign.common.errors import ConfigError
from campaign.launch.plan import PointPlan
from campaign.observe.estimate import CampaignCost, PointCost

PLAN_VERSION = 1  # of to_json's layout: from_json reads this one only


@dataclass(frozen=True)
class LaunchPlan:
    """What a launch sends, worked out once (module docstring)."""

    points: tuple[PointPlan, ...]  # the validated points, in the order they are stored
    sweep_overrides: tuple[str, ...]  # the sweep as given (Hydra's record of it)
    multirun: bool  # -m: a sweep that returns once submitted (else the foreground point)
    cost: CampaignCost  # each point's estimate (the store's measured rates, else the trainers' declarations)
    notes: tuple[str, ...]  # what this machine lacks for the jobs (a dry run's "would be refused here")
    writes: tuple[str, ...]  # what the preflight wrote or fetched (stand-in datasets, weights), said after the table
    refusals: tuple[str, ...]  # what a launch refuses on any machine (time limits), a dry run's "would be refused"
    design: tuple[str, ...]  # a study preset's design lines, before the points
    said: tuple[str, ...]  # what the command line did to the design (override: / note: lines)
    python: tuple[tuple[Optional[str], Optional[str]], ...]  # (image, job interpreter) pairs (submit.job_python)
    command: str  # the launch command the store records (redacted)
    store_url: str  # the store the campaign is registered in
    results_dir: str  # where its jobs write
    name: Optional[str]  # the campaign's name
    dry: Optional[str] = None  # the dry run's mode (true, scripts, json), None for a launch

    def job_python(self) -> dict[Optional[str], Optional[str]]:
        """The job interpreter of each image (``submit.job_python``'s map)."""
        return dict(self.python)

    def to_json(self) -> dict[str, Any]:
        """The plan as plain JSON values (``from_json`` reads them back exactly)."""
        out: dict[str, Any] = {"version": PLAN_VERSION}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "points":
                value = [point_json(p) for p in value]
            elif f.name == "cost":
                value = [asdict(c) for c in value.points]
            elif isinstance(value, tuple):
                value = [list(v) if isinstance(v, tuple) else v for v in value]
            out[f.name] = value
        return out

    @classmethod
    def from_json(cls, doc: Any) -> "LaunchPlan":
        """The plan ``to_json`` wrote; ``ConfigError`` naming what is missing or malformed."""
        if not isinstance(doc, dict) or doc.get("version") != PLAN_VERSION:
            raise ConfigError(f"not a launch plan of version {PLAN_VERSION}")
        try:
            values: dict[str, Any] = {}
            for f in fields(cls):
                value = doc[f.name]
                if f.name == "points":
                    value = tuple(point_from_json(p) for p in value)
                elif f.name == "cost":
                    value = CampaignCost([PointCost(**c) for c in value])
                elif f.name == "python":
                    value = tuple((image, python) for image, python in value)
                elif isinstance(value, list):
                    value = tuple(value)
                values[f.name] = value
            return cls(**values)
        except (KeyError, TypeError, ValueError) as exc:
            why = f"{type(exc).__name__}: {exc}"
            raise ConfigError(f"a launch plan with a missing or malformed field ({why})") from None


def point_json(p: PointPlan) -> dict[str, Any]:
    """A point as plain JSON values (``point_from_json`` reads it back exactly)."""
    out = asdict(p)
    out["resources"] = {**asdict(p.resources), "extra_sbatch": list(p.resources.extra_sbatch)}
    out["untouched"] = [list(u) for u in p.untouched]
    out["notes"] = list(p.notes)
    return out


def point_from_json(doc: dict[str, Any]) -> PointPlan:
    """The ``PointPlan`` ``point_json`` wrote."""
    doc = dict(doc)
    doc["resources"] = Resources(**doc["resources"])
    doc["untouched"] = tuple(tuple(u) for u in doc["untouched"])
    doc["notes"] = tuple(doc["notes"])
    return PointPlan(**doc)


def site_checks(points: Sequence[PointPlan], *, dry_run: bool) -> tuple[list[str], list[str]]:
    """What the site says of the points (notes: what this machine lacks; writes: what was
    written or fetched): a study's data rules, the preflight (store, folders, scheduler),
    the weights. A dry run gets each refusal as a note; a launch is refused (``ConfigError``)."""
    from campaign.launch.preflight import preflight
    from campaign.launch.study import study_datasets, write_standins
    from campaign.launch.weights import fetch_weights

    # a study preset's data rules; the stand-ins it writes wait for the preflight (nothing written before it)
    study_notes, writes, moot, pending = study_datasets(points, dry_run=dry_run)
    deferred = {root for _, root, _, _ in pending}
    notes = study_notes + [n for n in preflight(points, dry_run=dry_run, deferred=deferred)
                           if not n.startswith(tuple(moot))]
    if pending:
        write_standins(points, pending)
    lacks, fetches = fetch_weights(points, dry_run=dry_run)  # weights: checked (fetched once), here
    return notes + lacks, writes + fetches


def make_plan(points: Sequence[PointPlan], *, sweep_overrides: Sequence[str], multirun: bool) -> LaunchPlan:
    """The launch of ``points`` worked out once (module docstring). Raises ``CampaignError``
    for what a launch refuses before anything is stored (a dry run notes what it can)."""
    from campaign.launch.design import design_lines, override_lines, relabel, untouched_lines
    from campaign.launch.modes import dry_run_mode
    from campaign.launch.submit import command_line, job_python
    from campaign.launch.timelimit import check_time_limits, time_limit_refusals
    from campaign.launch.unread import check_read_somewhere
    from campaign.observe.estimate import campaign_cost, check_budget
    from campaign.observe.measured import launch_measured

    points = list(points)
    check_read_somewhere(points)  # a key the user typed that no point reads: refused
    said = ([f"override: {line}" for line in override_lines(points, sweep_overrides)]
            + [f"override: {line}" for line in untouched_lines(points)])
    design = design_lines(points, sweep_overrides)
    said += [f"override: {line}" for line in relabel(points, sweep_overrides)]  # after the design: it renames points
    said += [f"note: {line}" for line in dict.fromkeys(d for p in points for d in p.notes)]
    first = points[0].config
    dry = dry_run_mode(first.get("dry_run"))
    # what it will cost (the store's measured rates, else the trainers' declarations); over budget: refused
    cost = campaign_cost(points, launch_measured(points))
    check_budget(cost, first.get("max_gpu_hours"))
    if dry is None:  # a dry run shows them beside the estimates instead
        check_time_limits(points, cost)
    notes, writes = site_checks(points, dry_run=dry is not None)
    return LaunchPlan(
        points=tuple(points), sweep_overrides=tuple(sweep_overrides), multirun=multirun, cost=cost,
        notes=tuple(notes), writes=tuple(writes),
        refusals=tuple(time_limit_refusals(points, cost)) if dry is not None else (),
        design=tuple(design), said=tuple(said), python=tuple(job_python(points).items()),
        command=command_line(sweep_overrides, multirun=multirun), store_url=str(first["store"]["url"]),
        results_dir=str(first["results_dir"]), name=first.get("name"), dry=dry)


def as_launch(plan: LaunchPlan) -> LaunchPlan:
    """The launch a dry run's plan stands for: its ``dry_run`` setting dropped from the points'
    configs and overrides, the sweep and the command line, as a launch without it plans them."""
    from campaign.launch.submit import command_line

    def undry(overrides: Sequence[str]) -> list[str]:
        return [o for o in overrides if not o.startswith("dry_run=")]

    points = tuple(replace(p, overrides=undry(p.overrides), config={**p.config, "dry_run": "false"})
                   for p in plan.points)
    sweep = undry(plan.sweep_overrides)
    return replace(plan, points=points, sweep_overrides=tuple(sweep), dry=None, notes=(), writes=(), refusals=(),
                   command=command_line(sweep, multirun=plan.multirun))
