"""campaign resume, waves, automatic retries and checkpointed requeues on the real local
SLURM (scripts/local-slurm.sh; skipped when it is not up): a failed point resumed alone
completes; a campaign larger than platform.max_submit goes out in waves and completes,
its arrays throttled by platform.max_running; --max-retries stops at K; a checkpointing
run of 2 ranks signalled mid-loop with ``scancel --signal=USR2`` requeues itself, and its
resumed attempt continues at the right iteration with one consistent set of timing rows.
(Every job here is the sleep trainer's: what is checked is SLURM's side of it. A real model
requeued on SLURM: tests/test_internode.py's micro SwinV2; the synthetic trainer's own state
across a signalled stop: tests/test_checkpoint.py.)"""

from __future__ import annotations

import json
import os
import time

import pytest

from conftest import EMULATED_GPUS, Workspace, campaign_id_from

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
ONE_CPU = ["platform.cpus_per_task=1", EMULATED_GPUS]
SLEEPY = ["trainer=sleep", "experiment=smoke", "experiment.base_iterations=4", "trainer.params.a_s=0.002",
          "trainer.params.c_s=0.0"]


class Campaigns:
    def __init__(self, ws: Workspace):
        self.ws = ws
        self.ids: list[str] = []

    def launch(self, *overrides: str):
        res = self.ws.launch("-m", "platform=v100", *ONE_CPU, *overrides, timeout=240)
        assert res.returncode == 0, res.stdout + res.stderr
        self.ids.append(campaign_id_from(res.stdout))
        return self.ids[-1], res

    def wait(self, cid: str, *extra: str, timeout: float = 420):
        return self.ws.campaign("status", cid, "--wait", "--interval", "1", "--timeout", str(timeout), *extra,
                                timeout=timeout + 60)

    def attempts(self, cid: str):
        return self.ws.query("select p.idx, a.attempt_no, a.state, a.origin, a.job_id from attempt a join point p "
                             "on p.id = a.point_id where p.campaign_id = ? order by p.idx, a.attempt_no", cid)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from test_slurm import _cluster_up

    why = _cluster_up()
    if why:
        pytest.skip(why)
    ws = Workspace(tmp_path_factory.mktemp("resume-slurm"))
    ws.env["SLURM_CONF"] = os.environ.get("SLURM_CONF", "/tmp/campaign-slurm/etc/slurm.conf")
    c = Campaigns(ws)
    # launched together, each test then waits on its own (the checkpointed run is launched by its test)
    # one rank each: point 0 (fail_rank=null) completes, point 1 (fail_rank=0) fails
    c.failing = c.launch("gpus=1", *SLEEPY, "+trainer.params.fail_rank=null,0")
    c.retried = c.launch("gpus=1", *SLEEPY, "+trainer.params.fail_rank=0", "--max-retries", "1", "retry_on=[failed]")
    c.waves = c.launch("gpus=1", "seed=0,1,2", *SLEEPY, "platform.max_submit=2", "platform.max_running=1")
    yield c
    for cid in c.ids:
        ws.campaign("cancel", cid, timeout=60)


def test_a_failed_point_is_resumed_alone_on_slurm(runs):
    cid, _ = runs.failing
    assert runs.wait(cid).returncode == 1
    first = runs.attempts(cid)
    assert [(i, n, s) for i, n, s, _, _ in first] == [(0, 0, "completed"), (1, 0, "failed")]
    again = runs.ws.campaign("resume", cid, "trainer.params.fail_rank=null")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "resubmitted 1 point(s) as new attempts (1 submitted)" in again.stdout
    assert runs.wait(cid).returncode == 0
    after = runs.attempts(cid)
    assert after[0] == first[0]  # the completed point never ran again
    assert [(i, n, s, o) for i, n, s, o, _ in after[1:]] == [(1, 0, "failed", "launch"), (1, 1, "completed", "resume")]
    assert "_" in after[2][4] and after[2][4] != after[1][4]  # a new array task


def test_more_points_than_max_submit_go_out_in_waves_and_all_complete(runs):
    cid, res = runs.waves
    assert f"campaign {cid}: 2 of 3 point(s) submitted" in res.stdout and res.stdout.count("waiting for room") == 1
    assert "1 point(s) wait for room (platform.max_submit=2 of platform v100" in res.stdout
    done = runs.wait(cid, "--submit")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 point(s): 3 completed" in done.stdout
    assert [(i, n, s, o) for i, n, s, o, _ in runs.attempts(cid)] == [(i, 0, "completed", "launch") for i in range(3)]
    scripts = list((runs.ws.results / "jobs" / cid).glob("*_submission.sh"))
    assert scripts and all("#SBATCH --array=0-" in p.read_text() and "%1\n" in p.read_text() for p in scripts)


def test_max_retries_stops_at_k_on_slurm(runs):
    cid, _ = runs.retried
    done = runs.wait(cid, "--submit")
    assert done.returncode == 1 and "#0 failed: automatic retry 1 of 1: submitted, job" in done.stderr, done.stderr
    assert [(i, n, s, o) for i, n, s, o, _ in runs.attempts(cid)] == [(0, 0, "failed", "launch"),
                                                                        (0, 1, "failed", "retry")]


def test_usr2_requeues_a_checkpointing_run_that_resumes_where_it_stopped(runs):
    # 300 timed iterations of 0.1 s at 2 ranks (2 x 4 images x a_s/2), and a warm-up
    cid, _ = runs.launch("gpus=2", "trainer=sleep", "trainer.params.a_s=0.025", "trainer.params.b_s=0",
                         "trainer.params.c_s=0", "experiment=smoke", "experiment.base_iterations=600",
                         "experiment.checkpoint=true")
    ws = runs.ws
    end = time.monotonic() + 300
    while time.monotonic() < end and not ws.query("select 1 from attempt a join point p on p.id = a.point_id "
                                                  "where p.campaign_id = ? and a.state = 'running'", cid):
        time.sleep(1)
    time.sleep(10)  # well into the timed iterations (the signal's handler is in place by then)
    (job,) = ws.query("select job_id from point where campaign_id = ?", cid)[0]
    signalled = ws.run("scancel", "--signal=USR2", job)
    assert signalled.returncode == 0, signalled.stderr
    done = runs.wait(cid)
    assert done.returncode == 0, done.stdout + done.stderr
    attempts = ws.query("select a.attempt_no, a.state, a.origin, a.reason, a.job_id from attempt a join point p "
                        "on p.id = a.point_id where p.campaign_id = ? order by a.attempt_no", cid)
    assert [(n, s, o) for n, s, o, _, _ in attempts] == [(0, "requeued", "launch"), (1, "completed", "requeue")]
    assert attempts[0][4] == attempts[1][4]  # the same SLURM job, requeued (SLURM_RESTART_COUNT=1)
    stopped = int(attempts[0][3].split("checkpointed at iteration ")[1].split()[0])
    assert 0 < stopped < 301
    per_rank = ws.query("select i.rank, count(*), count(distinct i.iter), min(i.iter), max(i.iter), sum(i.warmup) "
                        "from iteration i join attempt a on a.id = i.attempt_id join point p on p.id = a.point_id "
                        "where p.campaign_id = ? group by a.attempt_no, i.rank", cid)
    assert per_rank == [(0, 301, 301, 0, 300, 1), (1, 301, 301, 0, 300, 1)]
    ((extra, wall),) = ws.query("select r.extra, r.wall_s from rank_timing r join attempt a on a.id = r.attempt_id "
                                "join point p on p.id = a.point_id where p.campaign_id = ? and r.rank = 0", cid)
    segments = json.loads(extra)["checkpoint"]["segments"]
    assert [(s["attempt"], s["first_iter"], s["end_iter"]) for s in segments] == [(0, 0, stopped), (1, stopped, 301)]
    assert segments[1]["gap_before_s"] > 0  # apart: the window is the segments' sum alone
    assert wall == pytest.approx(sum(s["wall_s"] for s in segments), rel=1e-6)
    table = json.loads(ws.campaign("harvest", cid, "--table", "attempts", "--to", "json").stdout)
    assert [(r["attempt"], r["state"], r["iterations"]) for r in table] == [
        (0, "requeued", f"0-{stopped - 1}"), (1, "completed", f"{stopped}-300")]
    assert table[0]["node"] and table[1]["gap_before_s"] > 0
