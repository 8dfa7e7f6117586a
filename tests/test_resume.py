"""campaign resume, waves and automatic retries on the local default executor (real jobs,
real SQLite): a failed point is rerun alone as a new attempt and completes, a completed
point never runs twice; a campaign larger than ``platform.max_submit`` goes out in
waves (a waiting launch's own: tests/test_launch_truth.py) and every point it was not
told to cancel completes; ``--max-retries K`` stops at K; what a resume refuses is one
line and changes nothing."""

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
    return ws.campaign("status", cid, "--wait", "--interval", "2", "--timeout", "240", *extra, timeout=300)


@pytest.fixture(scope="module")
def retried(tmp_path_factory):
    """One ended campaign of two one-rank points launched with ``--max-retries 2
    retry_on=[failed]``: point 0 completed, point 1 failed at once in each of its three
    attempts (launch, retry, retry), its rows all in; the wait that submitted the retries,
    and a second one (K used). The retry, refusal and dry-run tests read ``frozen``, a copy
    of its store as it ended (each leaves it as it was, and checks so); the resume test goes
    on with the campaign itself (``ws``)."""
    import sqlite3

    ws = Workspace(tmp_path_factory.mktemp("retried"))
    res = ws.launch("-m", "gpus=1", *SLEEPY, "+trainer.params.fail_rank=null,0", "--max-retries", "2",
                    "retry_on=[failed]")
    assert res.returncode == 0, res.stdout + res.stderr
    cid = campaign_id_from(res.stdout)
    done = _wait(ws, cid, "--submit")
    # status saw the last job end (its effective state); the job's own row may land a moment
    # later (a digest taken before it would differ from one taken after, through no doing of a test)
    until(lambda: len(a := _attempts(ws, cid)) == 4 and a[-1][2] not in ("pending", "running"), 30,
          "the last retry's attempt row")
    again = _wait(ws, cid, "--submit")
    frozen = Workspace(tmp_path_factory.mktemp("retried-copy"))
    frozen.results.mkdir(parents=True)
    src, dst = sqlite3.connect(ws.db), sqlite3.connect(frozen.db)
    try:
        src.backup(dst)
    finally:
        src.close()
        dst.close()
    return {"ws": ws, "cid": cid, "done": done, "again": again, "frozen": frozen}


@pytest.mark.slow
def test_max_retries_resubmits_a_retry_on_failure_and_stops_at_k(retried):
    # point 0 completes, point 1 fails at once, on one rank each (a job per attempt: four)
    done, again, frozen, cid = retried["done"], retried["again"], retried["frozen"], retried["cid"]
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.count("#1 failed: automatic retry") == 2
    assert "automatic retry 1 of 2: submitted" in done.stderr and "automatic retry 2 of 2: submitted" in done.stderr
    assert [(i, n, s, o) for i, n, s, o, _ in _attempts(frozen, cid)] == [
        (0, 0, "completed", "launch"), (1, 0, "failed", "launch"), (1, 1, "failed", "retry"), (1, 2, "failed", "retry")]
    # K used: the second wait submitted nothing more (the copy was taken after it)
    assert again.returncode == 1 and "automatic retry" not in again.stderr


@pytest.mark.slow
def test_a_failed_point_is_resumed_alone_and_completes(retried):
    """The campaign whose point 1 used up its automatic retries: a resume with the fix reruns
    that point alone, as a new attempt, and it completes; point 0 never runs twice."""
    ws, cid = retried["ws"], retried["cid"]
    first = _attempts(ws, cid)
    assert [(i, n, s) for i, n, s, _, _ in first] == [(0, 0, "completed"), (1, 0, "failed"), (1, 1, "failed"),
                                                     (1, 2, "failed")]
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
    assert [(i, n, s, o) for i, n, s, o, _ in after[1:]] == [
        (1, 0, "failed", "launch"), (1, 1, "failed", "retry"), (1, 2, "failed", "retry"), (1, 3, "completed", "resume")]
    assert after[4][4] not in {a[4] for a in first}  # a new job
    assert ws.query("select a.overrides from attempt a join point p on p.id = a.point_id where p.idx = 1 "
                    "and a.attempt_no = 3") == [('["trainer.params.fail_rank=null"]',)]
    # the point carries the fix from now on; status counts the attempts
    doc = json.loads(ws.campaign("status", cid, "--json").stdout)
    assert [(p["state"], p["attempts"]) for p in doc["points"]] == [("completed", 1), ("completed", 4)]
    stored = json.loads(ws.query("select config from point where idx = 1 and campaign_id = ?", cid)[0][0])
    assert stored["trainer"]["params"]["fail_rank"] is None

    # harvest: every point, each from its latest completed attempt (the failed ones add nothing)
    rows = json.loads(ws.campaign("harvest", cid, "--to", "json").stdout)
    assert [r["gpus"] for r in rows] == [1, 1] and all(r["repeats"] == 1 for r in rows)
    table = json.loads(ws.campaign("harvest", cid, "--table", "attempts", "--to", "json").stdout)
    assert [(r["idx"], r["attempt"], r["state"], r["origin"]) for r in table] == [
        (0, 0, "completed", "launch"), (1, 0, "failed", "launch"), (1, 1, "failed", "retry"), (1, 2, "failed", "retry"),
        (1, 3, "completed", "resume")]
    assert table[1]["reason"].startswith("rank 0: RuntimeError: injected failure") and table[1]["node"]
    assert table[4]["overrides"] == "trainer.params.fail_rank=null" and table[4]["elapsed_s"] > 0

    nothing = ws.campaign("resume", cid)
    assert nothing.returncode == 0 and nothing.stdout.strip() == f"campaign {cid}: nothing to resume (2 completed)"


@pytest.mark.parametrize("argv,message", [
    (["gpus=4"], "override 'gpus=4' changes what the point is (gpus); a resume runs the same points again"),
    (["platform=v100"], "override 'platform=v100' picks another platform, which makes another point: launch it"),
    (["platform.time_limit_min=5,10"], "override 'platform.time_limit_min=5,10' is a sweep"),
    (["+trainer.params.x=1"], "a resume takes KEY=VALUE only (no +, ~, ++ or @package)"),
    (["experiment.base_iterations=16"], "point #1: the overrides change its iterations (4 -> 16), which makes "
                                        "another point: launch a campaign for it"),
    (["platform.time_limit_min=soon"], "platform.time_limit_min"),
    (["platform.no_such_key=1"], "no_such_key"),
    (["--state", "completed"], "--state 'completed': completed is not a state a resume reruns; valid: failed,"),
    (["nosuch"], "no campaign 'nosuch'"),
])
@pytest.mark.slow
def test_what_a_resume_refuses_is_one_line_and_changes_nothing(retried, argv, message):
    ws = retried["frozen"]
    before = _digest(ws.db)
    bad = ws.campaign("resume", *argv)
    assert bad.returncode == 2 and bad.stderr.startswith("error: ") and bad.stderr.count("\n") == 1, bad.stderr
    assert message in bad.stderr and "Traceback" not in bad.stderr
    assert _digest(ws.db) == before


@pytest.mark.slow
def test_a_campaign_larger_than_max_submit_goes_out_in_waves(ws):
    """Four points, one in the scheduler at a time. A waiting point is unfinished everywhere:
    status shows it waiting, harvest leaves it out and says so, cancel records it cancelled
    (there is no job to stop: point 3 here) and a resume takes it again; the other two go out
    in two more waves, the last submitted when the second ends."""
    res = ws.launch("-m", "gpus=1", "seed=0,1,2,3", *SLEEPY, "platform.max_submit=1")
    assert res.returncode == 0, res.stderr
    cid = campaign_id_from(res.stdout)
    assert f"campaign {cid}: 1 of 4 point(s) submitted" in res.stdout
    assert ("3 point(s) wait for room (platform.max_submit=1 of platform local (this campaign's points in the "
            f"scheduler at once)): campaign resume {cid} submits the next wave as jobs end") in res.stdout
    assert res.stdout.count("waiting for room") == 3
    states = ws.query("select idx, state, reason from point where campaign_id = ? order by idx", cid)
    assert [s for _, s, _ in states][1:] == ["waiting", "waiting", "waiting"]
    assert states[1][2].startswith("waiting for room: platform.max_submit=1 of platform local")
    doc = json.loads(ws.campaign("status", cid, "--json").stdout)
    assert doc["points"][1]["state"] == "waiting" and doc["points"][1]["job_id"] is None
    assert doc["points"][1]["reason"].startswith("waiting for room: platform.max_submit=1")
    alone = ws.campaign("status", cid, "--submit")
    assert alone.returncode == 2 and alone.stderr.startswith("error: --submit goes with --wait")
    plain = _wait(ws, cid)  # a plain wait does not submit: it stops when only waiting points are left
    assert plain.returncode == 1 and f"3 point(s) wait for room in the scheduler: campaign resume {cid}" in plain.stderr
    harvest = ws.campaign("harvest", cid, "--to", "csv")
    assert harvest.returncode == 0 and "1 of 4 point(s) completed; not harvested: 3 waiting" in harvest.stderr
    cancelled = ws.campaign("cancel", cid, "--point", "3")
    assert cancelled.returncode == 0 and cancelled.stdout.strip() == f"campaign {cid}: cancelled 1 point(s)"
    assert ws.query("select state from point where campaign_id = ? order by idx", cid) == [
        ("completed",), ("waiting",), ("waiting",), ("cancelled",)]
    again = ws.campaign("resume", cid, "--dry-run")
    assert again.returncode == 0 and "would resubmit 3 point(s)" in again.stdout and "cancelled" in again.stdout
    done = _wait(ws, cid, "--submit")
    assert done.returncode == 1, done.stdout + done.stderr  # point 3 stays cancelled
    assert done.stderr.count("waited for room: submitted, job") == 2
    assert "4 point(s): 3 completed, 1 cancelled" in done.stdout, done.stdout
    attempts = _attempts(ws, cid)
    assert [(i, n, s, o) for i, n, s, o, _ in attempts[:3]] == [(i, 0, "completed", "launch") for i in range(3)]
    assert [(i, s, j) for i, _, s, _, j in attempts[3:]] == [(3, "cancelled", None)]  # never had a job, not waiting


@pytest.mark.slow
def test_a_dry_run_resume_takes_overrides_anywhere_and_needs_no_write_access(retried, monkeypatch, capsys):
    """Overrides after an option (``resume CID --dry-run KEY=V``) were 'unrecognized
    arguments'; a dry run on a store this user cannot write was refused (exit 2), where a
    dry run writes nothing: it says what a resume would be refused here for, as a launch's
    dry run does, and names --store, not results_dir (review of 2026-11-26)."""
    import os

    from campaign.launch import preflight
    from campaign.launch.resume import resume

    ws, cid = retried["frozen"], retried["cid"]
    before = _digest(ws.db)
    dry = ws.campaign("resume", cid, "--dry-run", "trainer.params.fail_rank=null")
    assert dry.returncode == 0, dry.stderr
    assert f"campaign {cid}: would resubmit 1 point(s) as new attempts; with trainer.params.fail_rank=null" in dry.stdout
    folder = str(ws.db.parent)
    access = os.access
    monkeypatch.setattr(preflight.os, "access", lambda p, mode: False if str(p) == folder else access(p, mode))
    out = resume(cid, ws.store_url, dry_run=True)
    assert out.dry_run and [r["idx"] for r in out.rows] == [1]
    printed = capsys.readouterr().out
    assert (f"note: would be refused here: the store's folder {folder} is not writable by this user; choose another "
            "one (store.url=sqlite:///PATH, or --store URL) or fix its permissions") in printed, printed
    assert _digest(ws.db) == before
