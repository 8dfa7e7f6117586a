"""Failure that tells the truth, on real jobs: a point whose job controller or a rank
died is failed in status, --json and harvest alike, its elapsed time stops at its
end, and a local point past its time limit is a timeout. Local default and the real
local SLURM (marker ``slurm``)."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from conftest import campaign_id_from, until
from test_slurm import ONE_CPU, cluster  # noqa: F401  (fixture: skips without the local cluster)

LONG_SLEEP = ["trainer=sleep", "experiment.base_iterations=100000000", "experiment.until_time_limit=true", "experiment.warmup_iterations=1",
              "trainer.params.a_s=0.001", "trainer.params.c_s=0"]


def _ranks(env_key: str, value: str) -> list[tuple[int, int, dict]]:
    """(pid, ppid, environ) of the rank processes whose environment has env_key=value."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
            if b"submitit.core._submit" not in argv or os.path.basename(argv[0]) == b"srun":
                continue
            with open(f"/proc/{entry}/environ", "rb") as fh:
                env = dict(kv.split(b"=", 1) for kv in fh.read().split(b"\0") if b"=" in kv)
            with open(f"/proc/{entry}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != b"Z" and env.get(env_key.encode()) == value.encode():
            found.append((int(entry), int(fields[1]), {k.decode(): v.decode(errors="replace") for k, v in env.items()}))
    return found


def _agree(run, cid: str) -> dict:
    """status --wait ends, --json and the table say the same, harvest counts nothing,
    elapsed does not grow; returns the point."""
    wait = run("status", cid, "--wait", "--interval", "0.5", "--timeout", "120")
    assert wait.returncode == 1, wait.stdout + wait.stderr
    (p,) = json.loads(run("status", cid, "--json").stdout)["points"]
    assert f"1 point(s): 1 {p['state']}" in wait.stdout
    harvest = run("harvest", cid, "--to", "csv")
    assert harvest.returncode == 1 and "no completed point to harvest yet" in harvest.stderr, harvest.stderr
    time.sleep(2)
    (again,) = json.loads(run("status", cid, "--json").stdout)["points"]
    assert again["state"] == p["state"] and again["elapsed_s"] == p["elapsed_s"]  # stopped at its end
    return p


@pytest.mark.slow
def test_a_killed_job_controller_fails_its_point_everywhere(ws):
    """kill -9 of a local job's controller while its ranks run: the ranks end themselves
    (their parent died), the point is failed in status, --json and harvest, never
    completed, and no process of the job is left."""
    res = ws.launch("-m", "gpus=2", *LONG_SLEEP)
    assert res.returncode == 0, res.stderr
    cid = campaign_id_from(res.stdout)
    job = until(lambda: ws.query("select job_id from point where state = 'running'"), 120, "the job to run")[0][0]
    ranks = until(lambda: len(r := _ranks("SUBMITIT_LOCAL_JOB_ID", job)) >= 2 and r, 60, "both ranks")
    controller = ranks[0][1]
    with open(f"/proc/{controller}/cmdline", "rb") as fh:
        assert b"submitit.local._local" in fh.read()
    os.kill(controller, signal.SIGKILL)
    until(lambda: not _ranks("SUBMITIT_LOCAL_JOB_ID", job), 60, "the orphaned ranks to end")
    p = _agree(lambda *a: ws.campaign(*a), cid)
    assert p["state"] == "failed", p
    # killed while it ran, or (a slow start) while a rank was still starting: either way named
    assert "ControllerGone: the job's controller" in p["reason"], p["reason"]
    assert "ended while this rank ran" in p["reason"] or "ended before this rank started" in p["reason"], p["reason"]
    assert p["elapsed_s"] is not None


@pytest.mark.slow
def test_a_local_point_past_its_time_limit_is_timeout(ws):
    res = ws.launch("-m", "gpus=1", "platform.time_limit_min=1", *LONG_SLEEP)
    assert res.returncode == 0, res.stderr
    cid = campaign_id_from(res.stdout)
    p = _agree(lambda *a: ws.campaign(*a), cid)
    assert p["state"] == "timeout", p
    assert p["reason"].startswith("time limit reached (platform.time_limit_min=1; a local job is stopped 30 s before it)")
    # stopped 30 s before the 1-minute limit: elapsed counts from the rank's start, which a
    # loaded machine delays by seconds (it read 17.2 s once), so only the limit bounds it
    assert 0 < p["elapsed_s"] <= 60


@pytest.mark.slurm
def test_a_killed_rank_fails_its_slurm_point_everywhere(cluster, ws):  # noqa: F811
    """SIGKILL of rank 0 of a 2-rank SLURM job (it reports nothing): srun ends the step,
    SLURM says FAILED, and status, --json and harvest agree the point failed."""
    store = ["--store", ws.store_url]
    res = ws.launch("-m", "platform=v100", "gpus=2", "experiment=smoke", "platform.time_limit_min=5", *ONE_CPU,
                    *LONG_SLEEP)
    assert res.returncode == 0, res.stdout + res.stderr
    cid = campaign_id_from(res.stdout)
    try:
        job = until(lambda: ws.query("select job_id from point where state = 'running'"), 180, "the job to run")[0][0]
        array, task = job.split("_")
        ranks = until(lambda: len(r := [x for x in _ranks("SLURM_ARRAY_JOB_ID", array)
                                         if x[2].get("SLURM_ARRAY_TASK_ID") == task]) >= 2 and r, 60, "the job's ranks")
        (rank0,) = [pid for pid, _, env in ranks if env.get("SLURM_PROCID") == "0"]
        os.kill(rank0, signal.SIGKILL)
        p = _agree(lambda *a: ws.campaign(*a, *store), cid)
    finally:
        ws.campaign("cancel", cid, *store)
    assert p["state"] == "failed", p
    assert p["reason"].startswith(("rank 1: ", "SLURM: FAILED")), p["reason"]


def test_a_rank_whose_controller_is_gone_before_it_watches_fails_at_once(monkeypatch):
    """The race the kernel's parent-death signal cannot cover: the controller is killed
    while a rank still starts (imports take seconds), so the rank is init's child before
    it can ask; it must fail at once, not train unwatched."""
    from trainers import orphan

    monkeypatch.setenv("SUBMITIT_EXECUTOR", "local")
    monkeypatch.setattr(orphan, "_is_controller", lambda pid: False)
    with pytest.raises(orphan.ControllerGone, match="ended before this rank started"):
        orphan.watch_controller()
