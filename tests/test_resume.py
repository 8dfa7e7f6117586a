"""campaign resume, waves and automatic retries on the local default executor (real jobs,
real SQLite): a failed point is rerun alone as a new attempt and completes, a completed
point never runs twice; a campaign larger than ``platform.max_submit`` goes out in
waves and every point completes; ``--max-retries K`` stops at K; what a resume refuses
is one line and changes nothing."""

from __future__ import annotations

import hashlib
import json
import sys

import pytest

from conftest import Workspace, campaign_id_from, until

SLEEPY = ["trainer=sleep", "experiment=smoke", "experiment.base_iterations=4", "trainer.params.a_s=0.002",
          "trainer.params.c_s=0.0"]


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _attempts(ws, cid):
    return ws.query("select p.idx, a.attempt_no, a.state, a.origin, a.job_id from attempt a join point p "
                    "on p.id = a.point_id where p.campaign_id = ? order by p.idx, a.attempt_no", cid)


def _wait(ws, cid, *extra):
    return ws.campaign("status", cid, "--wait", "--interval", "0.5", "--timeout", "240", *extra, timeout=300)


@pytest.mark.slow
def test_a_failed_point_is_resumed_alone_and_completes(ws):
    res = ws.launch("-m", "gpus=1,2", *SLEEPY, "+trainer.params.fail_rank=1")
    assert res.returncode == 0, res.stderr
    cid = campaign_id_from(res.stdout)
    assert _wait(ws, cid).returncode == 1
    first = _attempts(ws, cid)
    assert [(i, n, s) for i, n, s, _, _ in first] == [(0, 0, "completed"), (1, 0, "failed")]
    # launch --retry is resume for what never reached a scheduler: a failed point is not its job
    alias = ws.run(sys.executable, "-m", "campaign", "launch", "--retry", cid)
    assert alias.returncode == 0
    assert alias.stderr.startswith("note: campaign launch --retry is campaign resume --state rejected,lost,waiting")
    assert alias.stdout.strip() == f"campaign {cid}: nothing to resume (1 completed, 1 failed)"
    assert _attempts(ws, cid) == first

    dry = ws.campaign("resume", cid, "--dry-run")
    assert dry.returncode == 0 and f"campaign {cid}: would resubmit 1 point(s) as new attempts; left alone: " \
                                   "1 completed" in dry.stdout
    assert _attempts(ws, cid) == first  # a dry run submits nothing

    again = ws.campaign("resume", cid, "trainer.params.fail_rank=null")
    assert again.returncode == 0, again.stdout + again.stderr
    assert (f"campaign {cid}: resubmitted 1 point(s) as new attempts (1 submitted); with trainer.params.fail_rank=null; "
            "left alone: 1 completed") in again.stdout
    assert "#1 " in again.stdout and "#0 " not in again.stdout
    assert _wait(ws, cid).returncode == 0
    after = _attempts(ws, cid)
    assert after[0] == first[0]  # the completed point: the same single attempt, the same job
    assert [(i, n, s, o) for i, n, s, o, _ in after[1:]] == [(1, 0, "failed", "launch"), (1, 1, "completed", "resume")]
    assert after[2][4] != first[1][4]  # a new job
    assert ws.query("select a.overrides from attempt a join point p on p.id = a.point_id where p.idx = 1 "
                    "and a.attempt_no = 1") == [('["trainer.params.fail_rank=null"]',)]
    # the point carries the fix from now on; status counts the attempts
    doc = json.loads(ws.campaign("status", cid, "--json").stdout)
    assert [(p["state"], p["attempts"]) for p in doc["points"]] == [("completed", 1), ("completed", 2)]
    stored = json.loads(ws.query("select config from point where idx = 1 and campaign_id = ?", cid)[0][0])
    assert stored["trainer"]["params"]["fail_rank"] is None

    # harvest: every point, each from its latest completed attempt (the failed one adds nothing)
    rows = json.loads(ws.campaign("harvest", cid, "--to", "json").stdout)
    assert sorted(r["gpus"] for r in rows) == [1, 2] and all(r["repeats"] == 1 for r in rows)
    table = json.loads(ws.campaign("harvest", cid, "--table", "attempts", "--to", "json").stdout)
    assert [(r["idx"], r["attempt"], r["state"], r["origin"]) for r in table] == [
        (0, 0, "completed", "launch"), (1, 0, "failed", "launch"), (1, 1, "completed", "resume")]
    assert table[1]["reason"].startswith("rank 1: RuntimeError: injected failure") and table[1]["node"]
    assert table[2]["overrides"] == "trainer.params.fail_rank=null" and table[2]["elapsed_s"] > 0

    nothing = ws.campaign("resume", cid)
    assert nothing.returncode == 0 and nothing.stdout.strip() == f"campaign {cid}: nothing to resume (2 completed)"


@pytest.fixture(scope="module")
def failed_alone(tmp_path_factory):
    """One ended campaign of one failed point (gpus=1, fail_rank=0), its job's rows all in:
    what the refusals and dry runs below are given (each leaves it as it was, and checks so)."""
    ws = Workspace(tmp_path_factory.mktemp("failed-alone"))
    res = ws.launch("-m", "gpus=1", *SLEEPY, "+trainer.params.fail_rank=0")
    assert res.returncode == 0, res.stdout + res.stderr
    cid = campaign_id_from(res.stdout)
    assert _wait(ws, cid).returncode == 1
    # status saw the job end; its own attempt row may land a moment later (a digest taken
    # before it would differ from one taken after, through no doing of the test)
    until(lambda: _attempts(ws, cid)[0][2] == "failed", 30, "the failed attempt's row")
    return ws, cid


@pytest.mark.parametrize("argv,message", [
    (["gpus=4"], "override 'gpus=4' changes what the point is (gpus); a resume runs the same points again"),
    (["platform=v100"], "override 'platform=v100' picks another platform, which makes another point: launch it"),
    (["platform.time_limit_min=5,10"], "override 'platform.time_limit_min=5,10' is a sweep"),
    (["+trainer.params.x=1"], "a resume takes KEY=VALUE only (no +, ~, ++ or @package)"),
    (["experiment.base_iterations=16"], "point #0: the overrides change its iterations (4 -> 16), which makes "
                                        "another point: launch a campaign for it"),
    (["platform.time_limit_min=soon"], "platform.time_limit_min"),
    (["platform.no_such_key=1"], "no_such_key"),
    (["--state", "completed"], "--state 'completed': completed is not a state a resume reruns; valid: failed,"),
    (["nosuch"], "no campaign 'nosuch'"),
])
@pytest.mark.slow
def test_what_a_resume_refuses_is_one_line_and_changes_nothing(failed_alone, argv, message):
    ws, _ = failed_alone
    before = _digest(ws.db)
    bad = ws.campaign("resume", *argv)
    assert bad.returncode == 2 and bad.stderr.startswith("error: ") and bad.stderr.count("\n") == 1, bad.stderr
    assert message in bad.stderr and "Traceback" not in bad.stderr
    assert _digest(ws.db) == before


@pytest.mark.slow
def test_a_campaign_larger_than_max_submit_goes_out_in_waves(ws):
    # three points, one in the scheduler at a time: three waves, the last submitted when the second ends
    res = ws.launch("-m", "gpus=1", "seed=0,1,2", *SLEEPY, "platform.max_submit=1")
    assert res.returncode == 0, res.stderr
    cid = campaign_id_from(res.stdout)
    assert f"campaign {cid}: 1 of 3 point(s) submitted" in res.stdout
    assert ("2 point(s) wait for room (platform.max_submit=1 of platform local (this campaign's points in the "
            f"scheduler at once)): campaign resume {cid} submits the next wave as jobs end") in res.stdout
    assert res.stdout.count("waiting for room") == 2
    states = ws.query("select idx, state, reason from point where campaign_id = ? order by idx", cid)
    assert [s for _, s, _ in states][1:] == ["waiting", "waiting"]
    assert states[1][2].startswith("waiting for room: platform.max_submit=1 of platform local")
    plain = _wait(ws, cid)  # a plain wait does not submit: it stops when only waiting points are left
    assert plain.returncode == 1 and f"2 point(s) wait for room in the scheduler: campaign resume {cid}" in plain.stderr
    done = _wait(ws, cid, "--submit")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr.count("waited for room: submitted, job") == 2
    assert "3 point(s): 3 completed" in done.stdout
    attempts = _attempts(ws, cid)
    assert [(i, n, s, o) for i, n, s, o, _ in attempts] == [(i, 0, "completed", "launch") for i in range(3)]


@pytest.mark.slow
def test_max_retries_resubmits_a_retry_on_failure_and_stops_at_k(ws):
    # point 0 completes, point 1 fails at once, on one rank each (a job per attempt: four, not seven)
    res = ws.launch("-m", "gpus=1", *SLEEPY, "+trainer.params.fail_rank=null,0", "--max-retries", "2",
                    "retry_on=[failed]")
    assert res.returncode == 0, res.stderr
    cid = campaign_id_from(res.stdout)
    done = _wait(ws, cid, "--submit")
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.count("#1 failed: automatic retry") == 2
    assert "automatic retry 1 of 2: submitted" in done.stderr and "automatic retry 2 of 2: submitted" in done.stderr
    # status saw the last job end (its effective state); the job's own row may land a moment later
    attempts = until(lambda: (a := _attempts(ws, cid))[-1][2] not in ("pending", "running") and a, 30,
                     "the last retry's attempt row")
    assert [(i, n, s, o) for i, n, s, o, _ in attempts] == [
        (0, 0, "completed", "launch"), (1, 0, "failed", "launch"), (1, 1, "failed", "retry"), (1, 2, "failed", "retry")]
    again = _wait(ws, cid, "--submit")  # K used: nothing more is submitted
    assert again.returncode == 1 and "automatic retry" not in again.stderr
    assert len(_attempts(ws, cid)) == 4


@pytest.mark.slow
def test_a_waiting_launch_submits_its_waves_itself(ws):
    res = ws.launch("-m", "gpus=1", "seed=0,1", *SLEEPY, "platform.max_submit=1", "hydra.launcher.wait=true",
                    timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    cid = campaign_id_from(res.stdout)
    assert ws.query("select state from point where campaign_id = ? order by idx", cid) == [("completed",), ("completed",)]


@pytest.mark.slow
def test_waiting_points_agree_in_status_harvest_and_cancel(ws):
    """A waiting point is unfinished everywhere: status shows it waiting, harvest leaves it
    out and says so, cancel records it cancelled (there is no job to stop) and a resume
    takes it again."""
    res = ws.launch("-m", "gpus=1", "seed=0,1", *SLEEPY, "platform.max_submit=1")
    cid = campaign_id_from(res.stdout)
    doc = json.loads(ws.campaign("status", cid, "--json").stdout)
    assert doc["points"][1]["state"] == "waiting" and doc["points"][1]["job_id"] is None
    assert doc["points"][1]["reason"].startswith("waiting for room: platform.max_submit=1")
    alone = ws.campaign("status", cid, "--submit")
    assert alone.returncode == 2 and alone.stderr.startswith("error: --submit goes with --wait")
    _wait(ws, cid)  # the submitted point completes; the other still waits
    harvest = ws.campaign("harvest", cid, "--to", "csv")
    assert harvest.returncode == 0 and "1 of 2 point(s) completed; not harvested: 1 waiting" in harvest.stderr
    cancelled = ws.campaign("cancel", cid)
    assert cancelled.returncode == 0 and cancelled.stdout.strip() == f"campaign {cid}: cancelled 1 point(s)"
    assert ws.query("select state from point where campaign_id = ? order by idx", cid) == [("completed",),
                                                                                            ("cancelled",)]
    again = ws.campaign("resume", cid, "--dry-run")
    assert again.returncode == 0 and "would resubmit 1 point(s)" in again.stdout and "cancelled" in again.stdout


@pytest.mark.slow
def test_a_dry_run_resume_takes_overrides_anywhere_and_needs_no_write_access(failed_alone, monkeypatch, capsys):
    """Overrides after an option (``resume CID --dry-run KEY=V``) were 'unrecognized
    arguments'; a dry run on a store this user cannot write was refused (exit 2), where a
    dry run writes nothing: it says what a resume would be refused here for, as a launch's
    dry run does, and names --store, not results_dir (review of 2026-11-26)."""
    import os

    from campaign.launch import preflight
    from campaign.launch.resume import resume

    ws, cid = failed_alone
    before = _digest(ws.db)
    dry = ws.campaign("resume", cid, "--dry-run", "trainer.params.fail_rank=null")
    assert dry.returncode == 0, dry.stderr
    assert f"campaign {cid}: would resubmit 1 point(s) as new attempts; with trainer.params.fail_rank=null" in dry.stdout
    folder = str(ws.db.parent)
    access = os.access
    monkeypatch.setattr(preflight.os, "access", lambda p, mode: False if str(p) == folder else access(p, mode))
    out = resume(cid, ws.store_url, dry_run=True)
    assert out.dry_run and [r["idx"] for r in out.rows] == [0]
    printed = capsys.readouterr().out
    assert (f"note: would be refused here: the store's folder {folder} is not writable by this user; choose another "
            "one (store.url=sqlite:///PATH, or --store URL) or fix its permissions") in printed, printed
    assert _digest(ws.db) == before
