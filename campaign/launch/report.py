"""What the launcher prints: the dry-run plan and the submission summary."""

from __future__ import annotations

import json
import shlex
from typing import Any, Sequence

from tabulate import tabulate

from campaign.launch.plan import PointPlan, job_plan
from campaign.redact import redact, redact_obj


def _resources(p: PointPlan) -> str:
    r = p.resources
    parts = [f"nodes={r.nodes}", f"tasks/node={r.tasks_per_node}", f"cpus/task={r.cpus_per_task}"]
    if r.gpus_per_node:
        parts.insert(1, f"gpus/node={r.gpus_per_node}")
    if r.partition:
        parts.insert(0, f"partition={r.partition}")
    if r.constraint:
        parts.append(f"constraint={r.constraint}")
    parts.append(f"time={r.timeout_min}min")
    return " ".join(parts)


def print_dry_run(points: Sequence[PointPlan]) -> None:
    print(f"dry run: {len(points)} point(s), nothing submitted\n")
    for p in points:
        plan = job_plan(p)
        print(f"[{p.idx}] {p.label()}")
        print(f"    resources: {_resources(p)}")
        print(f"    schedule:  {p.batch_per_gpu} images/GPU x {p.iterations} iterations "
              f"(+{plan['warmup']} warm-up, {plan['profile_iterations']} profiled)")
        print(f"    command:   {p.resources.tasks} x python -m submitit.core._submit "
              f"<job folder>  ->  trainers.job.run_point  ({redact(shlex.join(p.overrides)) or 'defaults'})")
        shown = redact_obj({k: p.config[k] for k in ("platform", "trainer", "experiment", "dataset")})
        print("    config:    " + json.dumps(shown, sort_keys=True))
    print()


def print_submitted(campaign_id: str, points: Sequence[PointPlan], submitted: Sequence[Any], store: str, *,
                    multirun: bool = True) -> None:
    """The campaign's points, each submitted (with its job) or refused (with why), and the
    commands that follow it; ``store`` is the ``--store`` option they need ("" for the default)."""
    rows = []
    for p, s in zip(points, submitted):
        rows.append([p.idx, p.platform, p.gpus, p.config["trainer"]["name"], p.config["experiment"]["name"],
                     s.job_id or "-", "submitted" if s.job_id else
                     ("waiting for room" if getattr(s, "waiting", None) else f"rejected: {redact(s.error)}")])
    done = sum(1 for s in submitted if s.job_id)
    where = "in the foreground" if not multirun and done else ""
    print(f"campaign {campaign_id}: {done} of {len(points)} point(s) submitted {where}".rstrip())
    held = [s.waiting for s in submitted if getattr(s, "waiting", None)]
    if held:  # campaign/launch/waves.py
        print(f"{len(held)} point(s) wait for room ({held[0].split('; ')[0].removeprefix('waiting for room: ')}): "
              f"campaign resume {campaign_id}{store} submits the next wave as jobs end "
              f"(or campaign status {campaign_id}{store} --wait --submit)")
    print(tabulate(rows, headers=["#", "platform", "gpus", "trainer", "experiment", "job", "state"], tablefmt="simple"))
    if multirun:
        print(f"\nfollow it:  campaign status {campaign_id}{store} --wait")
        print(f"results:    campaign harvest {campaign_id}{store}")
        if "***" in store:
            print("            (the store's password is shown as ***: give the whole URL, or set $CAMPAIGN_STORE)")
    print(flush=True)
