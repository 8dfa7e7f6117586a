"""What a dry run prints, and nothing else happens: no job, no store, no folder.

``dry_run=true`` (``campaign launch --dry-run``): one row per point (platform, GPUs,
nodes, partition, time limit, the values the sweep varies, the job array it goes in,
the trainer's memory estimate on its fullest GPU where it declares one, ``GiB/GPU``:
campaign/launch/memory.py; its estimated wall time and GPU-hours) and the campaign's estimate (campaign.observe.estimate),
per platform too where the points span several (``platform_costs``: the reference study's
schedule over V100 and A100 partitions, in GPU-hours each partition's account is charged).
``dry_run=scripts`` (``--show-scripts``): also what each backend shows of its jobs
(``Backend.dry_run_script``): the exact sbatch script of every job array and the exact
command its tasks run (a container's ``apptainer exec --nv --bind ... image.sif`` wrapper
included), or for local jobs the command each rank runs; made by the same pure functions
the submission uses (campaign.backends.sbatch, campaign.catalogue.container), so no runtime,
scheduler or image is needed to see them.
``dry_run=json`` (``--json``): one JSON object per point, for machines (its platform's
totals in ``platform_estimate``; ``emulated_gpus``: why its GPUs are emulated, or null).
A platform whose scheduler says its GPUs are emulated (campaign/launch/arch.py) gets a note
that its compute capability was not checked.

The campaign id is made when a campaign is stored; the scripts show ``DRYRUN`` where
it goes (the job folder ``results/jobs/<id>``, the job names).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence


from campaign.backends import JobGroup, by_executor, get_backend
from campaign.catalogue.dataset_label import dataset_label, names_dataset, study_of
from campaign.common import table as tables
from campaign.common.errors import ConfigError
from campaign.observe.estimate import CampaignCost, fmt_duration, fmt_gpu_hours
from campaign.launch.modes import dry_run_mode  # noqa: F401  (run.py, the sweeper and tests take it from here)
from campaign.launch.plan import PointPlan, job_plan
from campaign.common.redact import SECRET, is_secret_key, redact, redact_obj
from campaign.common.varying import varying

if TYPE_CHECKING:
    from campaign.launch.launchplan import LaunchPlan

PLACEHOLDER_ID = "DRYRUN"  # where the campaign id goes in a dry run's folders and job names


def arrays(points: Sequence[PointPlan], campaign_id: str = PLACEHOLDER_ID) -> list[JobGroup]:
    """The jobs the points go in, as their backends make them (``Backend.dry_run_groups``:
    SLURM's job arrays ``A1``..., the local jobs of one resource shape ``L1``...), each
    executor's in the registry's order."""
    return [g for backend, mine in by_executor(points) for g in backend.dry_run_groups(mine, campaign_id)]


def _where(arrs: Sequence[JobGroup]) -> dict[int, str]:
    """point idx -> ``A1[0]`` (array and task index) or ``L1`` (a local job)."""
    out = {}
    for a in arrs:
        for i, p in enumerate(a.points):
            out[p.idx] = f"{a.label}[{i}]" if a.tasks else a.label
    return out


# The overrides that are columns of their own in the dry run's table (the launch's shows nodes by its override)
_OWN_COLUMNS = ("platform", "gpus", "nodes", "trainer", "experiment", "study")


def swept_columns(points: Sequence[PointPlan], skip: Sequence[str] = _OWN_COLUMNS) -> tuple[list[str], list[list[str]]]:
    """(the swept keys: the overrides whose value differs between the points, beside those in
    ``skip``; per point, its value of each, ``-`` where it sets none, a secret's as ``***``):
    the columns that tell a sweep's rows apart (``trainer.optimizer``: sgd, adamw)."""
    names, values = varying([p.overrides for p in points], skip=skip)
    return names, [[SECRET if is_secret_key(n) else (redact(v[n]) or "-") for n in names] for v in values]


def points_table(points: Sequence[PointPlan], cost: CampaignCost, arrs: Sequence[JobGroup]) -> tuple[str, str]:
    """(the head line naming what every point shares, the table of points)."""
    names, values = swept_columns(points)
    axes = [a for a in ("trainer", "experiment") if len({p.config[a]["name"] for p in points}) > 1]
    shared = [f"{a}={points[0].config[a]['name']}" for a in ("trainer", "experiment") if a not in axes]
    where = _where(arrs)
    sched = schedule_columns(points)
    counts = [trainable_of(p) for p in points]
    shown_counts = len({c for c in counts if c is not None}) > 1  # where they differ: the DataParallel study's axis
    memory = any(p.gpu_memory_gib is not None for p in points)  # a trainer that estimates it (campaign/launch/memory.py)
    headers = ["#", "platform", "gpus", "nodes", "partition", "time limit", *axes, *names, *sched,
               *(["trainable"] if shown_counts else []), *(["GiB/GPU"] if memory else []), "array", "est. time",
               "GPU-h", "rate from"]
    rows = []
    for p, vals, c, n in zip(points, values, cost.points, counts):
        rows.append([p.idx, p.platform, p.gpus, p.nodes, p.resources.partition or "-",
                     fmt_limit(p.resources.timeout_min), *(p.config[a]["name"] for a in axes),
                     *vals, *(_schedule(p)[k] for k in sched),
                     *([f"{n:,}" if n is not None else "-"] if shown_counts else []),
                     *([f"{p.gpu_memory_gib:.1f}" if p.gpu_memory_gib is not None else "-"] if memory else []),
                     where[p.idx],
                     fmt_duration(c.wall_s), fmt_gpu_hours(c.gpu_hours), c.kind])
    shared += trainer_datasets(points)
    name = points[0].config.get("name")
    studies = list(dict.fromkeys((p.config.get("study") or {}).get("name") for p in points))
    if studies != [None]:  # a study preset's points: which study, and its words
        shared.insert(0, "study=" + ",".join(str(s or "-") for s in studies)
                      + (f" ({points[0].config['study']['title']})" if len(studies) == 1 else ""))
    head = "; ".join(([f"campaign {name}"] if name else []) + (["every point: " + " ".join(shared)] if shared else []))
    return head, tables.render(rows, headers=headers)


# A schedule knob a sweep may set: a point that overrides one differs from its experiment's default.
_SCHEDULE_KEYS = ("experiment.images_per_gpu", "experiment.global_batch", "experiment.iterations",
                  "experiment.base_iterations", "experiment.grad_accum", "experiment.scaling", "experiment.epochs")


def _schedule(p: PointPlan) -> dict[str, int]:
    exp = p.config["experiment"]
    grad_accum = int(exp.get("grad_accum") or 1)
    # strong scaling's own global batch: one split unevenly (DataParallel's 1,024 over 3) is still 1,024
    strong = exp.get("scaling") == "strong" and exp.get("global_batch")
    images = int(exp["global_batch"]) if strong else p.batch_per_gpu * p.gpus
    return {"img/GPU": p.batch_per_gpu, "global batch": images * grad_accum,
            "iterations": p.iterations}


def trainable_of(p: PointPlan) -> Optional[int]:
    """The point's trainable parameters as its trainer declares them (``TrainerDef.trainable_parameters``),
    or None where it declares none."""
    from trainers.registry import spec_of

    try:
        count = spec_of(p.config["trainer"]).trainable_parameters
    except Exception:  # noqa: BLE001 - a trainer the launch validated; its declaration is not this table's to judge
        return None
    return count(p.config) if count else None


def schedule_columns(points: Sequence[PointPlan]) -> list[str]:
    """The schedule's columns to show: images per GPU, global batch and iterations, each where
    its value differs between points or a point's overrides set the experiment's schedule
    (then every one of them, as that point's differs from the experiment's default)."""
    overridden = any(o.lstrip("+~").split("=", 1)[0] in _SCHEDULE_KEYS for p in points for o in p.overrides)
    rows = [_schedule(p) for p in points]
    return [k for k in ("img/GPU", "global batch", "iterations") if overridden or len({r[k] for r in rows}) > 1]


def epoch_lines(points: Sequence[PointPlan]) -> list[str]:
    """How the iterations column counts ``experiment.epochs=E`` (campaign/launch/plan.py
    ``epoch_schedule``): E epochs of each point's training share, warm-up included in them,
    so the column (timed iterations) is E x iterations per epoch less the warm-up."""
    seen = sorted({(int(p.config["experiment"]["epochs"]), int(p.config["experiment"].get("warmup_iterations") or 0))
                   for p in points if p.config["experiment"].get("epochs") is not None})
    return [f"iterations: experiment.epochs={e} epoch(s) of each point's training share, less its {w} warm-up "
            f"iteration(s)" for e, w in seen]


def trainer_datasets(points: Sequence[PointPlan]) -> list[str]:
    """``dataset=NAME 512px 150 classes`` (``28px 1-channel 10 classes``) when every point
    trains on the same dataset and its trainer picked it (its study's, ``TrainerDef.dataset``:
    no point names one), worded as status and harvest word it (campaign.catalogue.dataset_label);
    [] otherwise, as for the global default."""
    sections = {repr(sorted(p.config["dataset"].items(), key=str)) for p in points}
    if len(sections) > 1 or any(names_dataset(p.overrides) for p in points) or not study_of(points[0].config):
        return []
    return [f"dataset={dataset_label(points[0].config, points[0].overrides, why=True)}"]


def fmt_limit(minutes: int) -> str:
    """A time limit as ``H:MM:00`` (hours past 24 kept as hours, as sbatch's --time reads)."""
    return f"{minutes // 60}:{minutes % 60:02d}:00"


def estimate_lines(cost: CampaignCost) -> list[str]:
    """The campaign's estimate: total GPU-hours, wall time, where the rates come from."""
    known = [c for c in cost.points if c.known]
    serial = any(c.serial for c in cost.points)
    how = "points one after another on this machine" if serial else "if every point runs at once, queue wait not included"
    lines = []
    if known:
        lines.append(f"estimate: {fmt_gpu_hours(cost.gpu_hours)} GPU-hours, wall time {fmt_duration(cost.wall_s)} "
                     f"({how})" + ("" if cost.known else f"; {len(cost.points) - len(known)} point(s) unknown"))
    else:
        lines.append("estimate: unknown")
    sources: dict[str, int] = {}
    for c in cost.points:
        sources[c.source] = sources.get(c.source, 0) + 1
    for source, n in sources.items():
        lines.append(f"  rate of {n} point(s): {source}")
    return lines


@dataclass(frozen=True)
class PlatformCost:
    """One platform's share of a campaign's estimate: the sum of its points' own estimates."""

    platform: str
    points: int  # the campaign's points on this platform
    unknown: int  # ... of which the estimate is unknown (left out of the two below)
    longest_s: Optional[float]  # estimated wall time of its longest point (None: none known)
    gpu_hours: float  # its known points' GPU-hours, summed

    def as_json(self) -> dict[str, Any]:
        return {"platform": self.platform, "points": self.points, "unknown": self.unknown,
                "longest_wall_s": self.longest_s, "gpu_hours": self.gpu_hours}


def platform_costs(points: Sequence[PointPlan], cost: CampaignCost) -> list[PlatformCost]:
    """Each platform's points, the wall time of its longest and its GPU-hours, from the
    points' own estimates (``cost.points``, in the points' order), platforms in the order
    the sweep first names them."""
    grouped: dict[str, list] = {}
    for p, c in zip(points, cost.points):
        grouped.setdefault(p.platform, []).append(c)
    out = []
    for name, costs in grouped.items():
        known = [c for c in costs if c.known]
        out.append(PlatformCost(name, len(costs), len(costs) - len(known),
                                max((c.wall_s for c in known), default=None), sum(c.gpu_hours for c in known)))
    return out


def platform_lines(points: Sequence[PointPlan], cost: CampaignCost) -> list[str]:
    """``  v100            4 point(s), longest 5d 2:00:00, 812 GPU-hours`` per platform, under a
    head line, when the points span more than one platform and some estimate is known;
    [] otherwise (the campaign's estimate line says it all)."""
    rows = platform_costs(points, cost)
    if len(rows) < 2 or all(r.longest_s is None for r in rows):
        return []
    width = max(len(r.platform) for r in rows)
    lines = ["per platform (its points' estimates summed):"]
    for r in rows:
        said = (f"longest {fmt_duration(r.longest_s)}, {fmt_gpu_hours(r.gpu_hours)} GPU-hours"
                if r.longest_s is not None else "estimate unknown")
        unknown = f"; {r.unknown} point(s) unknown" if r.unknown and r.longest_s is not None else ""
        lines.append(f"  {r.platform:<{width}}  {r.points} point(s), {said}{unknown}")
    return lines


def emulated_lines(points: Sequence[PointPlan]) -> list[str]:
    """``platform v100's GPUs are emulated (...): its compute capability 7.0 was not checked
    against the torch build``, once per platform whose scheduler says so (``PointPlan.emulated_gpus``,
    campaign/launch/arch.py), in the order the sweep first names them."""
    seen: dict[str, str] = {}
    for p in points:
        if p.emulated_gpus and p.platform not in seen:
            cc = p.config["platform"].get("compute_capability")
            seen[p.platform] = (f"platform {p.platform}'s GPUs are emulated ({p.emulated_gpus}): its compute "
                                f"capability {cc} was not checked against the torch build")
    return list(seen.values())


def _folder(points: Sequence[PointPlan]) -> Path:
    return Path(points[0].config["results_dir"]).expanduser().absolute() / "jobs" / PLACEHOLDER_ID


def script_lines(points: Sequence[PointPlan], arrs: Sequence[JobGroup], python: Optional[str]) -> list[str]:
    """Every array's exact sbatch script and command (local jobs: their command); a
    container's variables (``container.env``) as the environment the command gets
    (``APPTAINERENV_HF_TOKEN=***``: names like a secret's masked)."""
    from campaign.catalogue.container import shown_env
    from campaign.launch.submit import container_environment, python_for

    folder = _folder(points)
    variables = container_environment(points)
    said = ""
    if variables:  # never on the command line: in the environment it inherits from the launch
        said = f"# in its environment (inherited from the launch, not on its command line): {shown_env(variables)}\n"
    out: list[str] = []
    for a in arrs:
        out += get_backend(a.executor).dry_run_script(a, folder, python_for(python, a.points[0]), said)
    return out


def json_lines(points: Sequence[PointPlan], cost: CampaignCost, arrs: Sequence[JobGroup]) -> list[str]:
    """One JSON object per point: its overrides, resources, schedule, array, estimate, its
    platform's totals (``platform_estimate``: ``PlatformCost``), config."""
    where = _where(arrs)
    totals = {r.platform: r.as_json() for r in platform_costs(points, cost)}
    out = []
    for p, c in zip(points, cost.points):
        out.append(json.dumps({
            "idx": p.idx, "label": redact(p.label()),
            "overrides": redact_obj([o for o in p.overrides if not o.startswith("dry_run=")]),
            "resources": asdict(p.resources), "schedule": job_plan(p), "array": where[p.idx],
            "estimate": {"s_per_it": c.s_per_it, "iterations": c.iterations, "wall_s": c.wall_s,
                         "gpu_hours": c.gpu_hours, "source": c.source},
            "platform_estimate": totals[p.platform],  # its platform's points together (platform_costs)
            "emulated_gpus": p.emulated_gpus,  # why its GPUs are emulated (not arch-checked), or null
            "trainable_parameters": trainable_of(p),  # the trainer's declaration (TrainerDef), or null
            "gpu_memory_gib": p.gpu_memory_gib,  # its estimate on its fullest GPU (campaign/launch/memory.py), or null
            "config": redact_obj({k: p.config[k] for k in ("platform", "trainer", "experiment", "dataset")}),
        }, sort_keys=True))
    return out


def print_dry_run(plan: "LaunchPlan") -> None:
    """Print ``plan`` (campaign/launch/launchplan.py) in its dry run's mode (module docstring):
    its points and estimates; ``plan.notes``: what this machine lacks for the jobs (the
    preflight's, campaign.launch.preflight); ``plan.refusals``: what a launch would refuse on
    any machine, shown beside the estimates (campaign.launch.timelimit); ``plan.design`` and
    ``plan.said``: a study preset's design and what the overrides did to it, before the points
    (campaign.launch.design; on stderr beside --json's lines)."""
    import sys

    from campaign.common.text import printable, shown

    points, cost, mode, python = list(plan.points), plan.cost, plan.dry, plan.job_python()
    notes, refusals, design = plan.notes, plan.refusals, plan.design + plan.said
    arrs = arrays(points)
    if mode == "json":
        for line in json_lines(points, cost, arrs):
            print(line)
        for n in refusals:
            print(f"note: would be refused: {printable(redact(n))}", file=sys.stderr)
        for n in notes:
            print(f"note: {printable(redact(n))}", file=sys.stderr)
        for line in design:
            print(printable(redact(line)), file=sys.stderr)
        return
    parts = [backend.dry_run_count([a for a in arrs if a.executor == backend.name])
             for backend, _ in by_executor(points)]
    print(f"dry run: {len(points)} point(s) in {' and '.join(parts)}; nothing is submitted or stored")
    for line in design:  # the study's design and what the command line did to it, before its points
        print(printable(redact(line)))
    head, table = points_table(points, cost, arrs)
    print(printable(redact(head)) if head else "", table, sep="\n" if head else "")
    for line in epoch_lines(points):
        print(line)
    for line in estimate_lines(cost) + platform_lines(points, cost):
        print(printable(line))
    from campaign.launch.submit import image_lines

    for line in image_lines(points):  # container.images: which image each platform's points run in
        print(printable(line))
    for line in emulated_lines(points):
        print(f"note: {printable(line)}")
    for n in refusals:
        print(f"note: would be refused: {printable(redact(n))}")
    for n in notes:
        print(f"note: would be refused here: {printable(redact(n))}")
    if mode == "scripts":
        print(f"\n(a launch puts its campaign id where {PLACEHOLDER_ID} stands)\n")
        for line in script_lines(points, arrs, python):
            for one in line.split("\n"):  # a script is several lines: each escaped on its own
                print(shown(one))
    print(flush=True)
