"""What the launcher prints: the dry-run plan and the submission summary."""

from __future__ import annotations

import json
import shlex
from typing import Any, Sequence

from tabulate import tabulate

from campaign.launch.plan import PointPlan, job_plan


def _resources(p: PointPlan) -> str:
    r = p.resources
    parts = [f"nodes={r['nodes']}", f"tasks/node={r['tasks_per_node']}", f"cpus/task={r['cpus_per_task']}"]
    if r["gpus_per_node"]:
        parts.insert(1, f"gpus/node={r['gpus_per_node']}")
    if r.get("partition"):
        parts.insert(0, f"partition={r['partition']}")
    if r.get("constraint"):
        parts.append(f"constraint={r['constraint']}")
    parts.append(f"time={r['timeout_min']}min")
    return " ".join(parts)


def print_dry_run(points: Sequence[PointPlan]) -> None:
    print(f"dry run: {len(points)} point(s), nothing submitted\n")
    for p in points:
        plan = job_plan(p)
        print(f"[{p.idx}] {p.label()}")
        print(f"    resources: {_resources(p)}")
        print(f"    schedule:  {p.batch_per_gpu} images/GPU x {p.iterations} iterations "
              f"(+{plan['warmup']} warm-up, {plan['profile_iterations']} profiled)")
        print(f"    command:   {p.resources['tasks_per_node'] * p.resources['nodes']} x python -m submitit.core._submit "
              f"<job folder>  ->  trainers.job.run_point  ({shlex.join(p.overrides) or 'defaults'})")
        print("    config:    " + json.dumps({k: p.config[k] for k in ("platform", "trainer", "experiment", "dataset")}, sort_keys=True))
    print()


def print_submitted(campaign_id: str, points: Sequence[PointPlan], submitted: Sequence[Any], base: Any) -> None:
    by_id = {s.point_id: s for s in submitted}
    rows = []
    for p, s in zip(points, submitted):
        rows.append([p.idx, p.platform, p.gpus, p.config["trainer"]["name"], p.config["experiment"]["name"],
                     s.job_id or "-", "submitted" if s.job_id else f"rejected: {s.error}"])
    print(f"campaign {campaign_id}: {sum(1 for s in by_id.values() if s.job_id)} of {len(points)} point(s) submitted")
    print(tabulate(rows, headers=["#", "platform", "gpus", "trainer", "experiment", "job", "state"], tablefmt="simple"))
    store = "" if str(base.store.url).endswith(f"{base.results_dir}/campaign.db") else f" --store {shlex.quote(str(base.store.url))}"
    print(f"\nfollow it:  campaign status {campaign_id}{store} --wait")
    print(f"results:    campaign harvest {campaign_id}{store}")
