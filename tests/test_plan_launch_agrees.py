"""``campaign plan --launch`` prints a line whose own dry run prices what the plan priced
(issue 49): the line keeps every override of the chosen series' signed point but the axes
it sets itself, so a setting every point shares (the main job's
``experiment.base_iterations=600``) is not lost. The main job here is a crafted store of its
two points, signed as a launch signs them; the sweep with shared settings is
tests/test_spine.py's (``test_plan_launch_line_prices_what_the_plan_priced``).

The plan prices the full schedule's training time (its ``time_h`` and ``gpu_hours``); a
dry run's estimate adds a stated start-up (``STARTUP_S``) and the warm-up and profiled
iterations to it, seconds that a full run's hours make negligible and the main job's few
seconds do not. So the two are compared where they price the same thing: the dry run's
seconds per iteration times its timed iterations against the plan's time to solution."""

from __future__ import annotations

import json
import re
import shlex
import time

from sqlalchemy import insert, select

from campaign.observe.estimate import STARTUP_S
from campaign.store import open_store
from campaign_sql.schema import attempt, rank_timing
from conftest import Workspace, _composed_point

CID = "20260101-000000-a1b2"
MAIN_JOB = ["platform=local", "experiment=weak_scaling", "experiment.base_iterations=600",
            "experiment.profile_iterations=8", "store.heartbeat_s=1", "name=main-job"]  # scripts/main-job.sh
S_PER_IT = {1: 0.0141, 2: 0.0391}  # the main job's measured rates on this machine (2 cores)


def _main_job_store(ws: Workspace) -> None:
    """The main job's two completed points (gpus=1,2), signed by this user's key."""
    rows = []
    for idx, gpus in enumerate((1, 2)):
        overrides = [MAIN_JOB[0], f"gpus={gpus}", *MAIN_JOB[1:]]
        config = json.loads(_composed_point(*[o for o in overrides if not o.startswith("name=")]))
        rows.append(dict(idx=idx, platform="local", trainer="synthetic", experiment="weak_scaling",
                         dataset="synthetic", gpus=gpus, nodes=1, repeat=0, executor="local", state="completed",
                         iterations=600 // gpus, batch_per_gpu=8, job_id=None, job_folder=None, reason=None,
                         log_path=None, config=config, overrides=json.dumps(overrides)))
    ws.results.mkdir(parents=True)
    now = time.time()
    with open_store(ws.store_url, create=True) as s:
        ids = s.register({"id": CID, "created_at": now - 120, "name": "main-job", "results_dir": str(ws.results)},
                         rows)
        with s.engine.begin() as conn:
            for pid, gpus in zip(ids, (1, 2)):
                conn.execute(insert(attempt), [dict(point_id=pid, attempt_no=0, state="completed",
                                                    started_at=now - 100, ended_at=now - 60)])
                aid = conn.execute(select(attempt.c.id).where(attempt.c.point_id == pid)).scalar_one()
                its = 600 // gpus
                conn.execute(insert(rank_timing), [
                    dict(attempt_id=aid, rank=r, iterations=its, warmup_iterations=5, warmup_s=0.2, startup_s=4.0,
                         wall_s=its * S_PER_IT[gpus] * (1 if r == 0 else 0.98), images=its * 8,
                         iter_mean_s=S_PER_IT[gpus], iter_median_s=S_PER_IT[gpus]) for r in range(gpus)])


def plan_lines(ws: Workspace, ref: str) -> list[tuple[float, float, str]]:
    """(time to solution in seconds, GPU-hours, the launch line) of each choice that
    ``campaign plan REF --budget 1 --hours 1 --launch`` prints."""
    res = ws.campaign("plan", ref, "--budget", "1", "--hours", "1", "--launch")
    assert res.returncode == 0, res.stdout + res.stderr
    out = res.stdout.splitlines()
    choices = []
    for i, line in enumerate(out):
        m = re.search(r"\(measured\): ([0-9.e+-]+) h, ([0-9.e+-]+) GPU-hours$", line)
        if m:
            assert out[i + 1].startswith("campaign launch "), out
            choices.append((float(m[1]) * 3600, float(m[2]), out[i + 1]))
    assert choices, res.stdout
    return choices


def dry_run_prices(ws: Workspace, line: str) -> tuple[float, float, dict]:
    """(training seconds, their GPU-hours, the whole estimate) of the line's own dry run."""
    res = ws.campaign(*shlex.split(line)[1:], "--dry-run", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    (point,) = [json.loads(ln) for ln in res.stdout.splitlines()]
    est, sched = point["estimate"], point["schedule"]
    assert est["source"].startswith("measured in campaign "), est
    gpus = point["resources"]["tasks_per_node"] * point["resources"]["nodes"]
    # the whole estimate: start-up, warm-up, timed and profiled iterations at the measured rate
    assert est["iterations"] == sched["warmup"] + sched["iterations"] + sched["profile_iterations"]
    assert abs(est["wall_s"] - (STARTUP_S + est["iterations"] * est["s_per_it"])) < 1e-6
    training = sched["iterations"] * est["s_per_it"]
    return training, training * gpus / 3600, est


def agrees(plan: float, dry: float) -> bool:
    return abs(dry - plan) <= 0.05 * plan


def test_the_main_jobs_plan_launch_line_prices_what_the_plan_priced(ws):
    _main_job_store(ws)
    choices = plan_lines(ws, "main-job")
    assert len(choices) == 2 and len(set(choices)) == 1  # the fastest is the cheapest: gpus=1
    for plan_s, plan_gpu_h, line in choices[:1]:
        assert line == ("campaign launch platform=local trainer=synthetic experiment=weak_scaling gpus=1 "
                        "experiment.sample_iterations=null experiment.base_iterations=600 "
                        "experiment.profile_iterations=8 store.heartbeat_s=1")
        training, gpu_h, est = dry_run_prices(ws, line)
        assert abs(plan_s - 600 * S_PER_IT[1]) <= 0.005 * plan_s  # the plan: 600 iterations at the measured rate
        assert agrees(plan_s, training) and agrees(plan_gpu_h, gpu_h), (plan_s, training, plan_gpu_h, gpu_h)
        assert est["wall_s"] < 3 * plan_s  # was 27:52 for a plan of 8.5 s: the line ran the default schedule
