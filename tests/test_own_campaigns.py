"""Your own campaigns by default (issue #48, the fourth finding), as a second user who can
write the shared store would craft it:

- another user (their own signing key, their own ``user``) registers a campaign dated
  newest whose point names the victim's SLURM job id, with an empty
  ``<jobid>_submitted.pkl`` in that campaign's own job folder;
- the victim's commands given no campaign (status, harvest, plan, report, cancel) take the
  victim's own newest campaign; a cancel naming the crafted one says whose it is and runs
  no ``scancel`` (a fake one on PATH records every call);
- a job id the victim's own campaign recorded without a signature (a store written before
  version 6) is not signalled either, said with the fix;
- with no campaign of yours, one line says how to name another's.

Crafted stores only (no launch): a few seconds.
"""

from __future__ import annotations

import getpass
import json
import os
import sqlite3
import time
from pathlib import Path

import pytest

from campaign.store import open_store
from conftest import Workspace, point_config

VICTIM, ATTACKER = "20260101-000000-aaaa", "20260101-000001-ffff"
VICTIM_JOB, OLD_JOB = "4242", "4243"
NOT_YOURS = ("is not yours: its points are not signed with your key (another user's, or launched with another key "
             "or before campaign signed points)")


def _row(idx: int, **kw) -> dict:
    row = dict(idx=idx, platform="local", trainer="synthetic", experiment="smoke", dataset="synthetic", gpus=1,
               nodes=1, repeat=0, executor="slurm", state="running", iterations=8, batch_per_gpu=4, job_id=None,
               job_folder=None, reason=None, log_path=None, config=point_config("gpus=1"), submitted_at=time.time())
    row.update(kw)
    return row


def _fake_slurm(ws: Workspace) -> Path:
    """SLURM clients that know no job (sacct/squeue say nothing: the stored state stands) and
    a scancel that records its argv, one call a line."""
    bin_dir, log = ws.path / "fake-slurm", ws.path / "scancel.log"
    bin_dir.mkdir()
    for name in ("sacct", "squeue", "sinfo", "scontrol"):
        (bin_dir / name).write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "scancel").write_text(f'#!/bin/sh\necho "$*" >> {log}\n')
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    ws.env["PATH"] = f"{bin_dir}{os.pathsep}{ws.env['PATH']}"
    return log


def _register(ws: Workspace, cid: str, created_at: float, results: Path, user: str, rows: list[dict],
              *, sign_jobs: bool = True) -> list[int]:
    """A campaign registered and its jobs recorded as a launch does, signed with the key of
    whoever runs it (CAMPAIGN_CONFIG_DIR)."""
    folder = results / "jobs" / cid
    folder.mkdir(parents=True)
    with open_store(ws.store_url, create=True) as s:
        ids = s.register({"id": cid, "created_at": created_at, "name": cid[-4:], "results_dir": str(results),
                          "user": user}, rows)
        s.mark_submitted([{"point_id": pid, "job_id": r["job_id"], "job_folder": str(folder), "executor": "slurm"}
                          for pid, r in zip(ids, rows)], cid if sign_jobs else None)
    return ids


@pytest.fixture
def crafted(ws, tmp_path, monkeypatch):
    """(workspace, scancel log): the victim's campaign (point 0: a job signed at submission;
    point 1: one recorded before job ids were signed) and, dated newest, another user's
    naming the victim's job, with its submission file planted."""
    log = _fake_slurm(ws)
    now = time.time()
    _register(ws, VICTIM, now - 600, ws.results, getpass.getuser(),
              [_row(0, job_id=VICTIM_JOB), _row(1, job_id=OLD_JOB)])
    con = sqlite3.connect(ws.db)  # point 1's job: as a store written before version 6 left it
    con.execute("update point set job_signature = null where campaign_id = ? and idx = 1", (VICTIM,))
    con.commit()
    con.close()
    # the other user: their own key and folder, a campaign dated a second ago
    monkeypatch.setenv("CAMPAIGN_CONFIG_DIR", str(tmp_path / "attacker-config"))
    theirs = tmp_path / "attacker-results"
    _register(ws, ATTACKER, now - 1, theirs, "mallory", [_row(0, job_id=VICTIM_JOB)])
    (theirs / "jobs" / ATTACKER / f"{VICTIM_JOB}_submitted.pkl").write_bytes(b"")
    monkeypatch.undo()
    return ws, log


def _states(ws: Workspace) -> dict:
    return {(c, i): st for c, i, st in ws.query("select campaign_id, idx, state from point order by id")}


def test_a_crafted_newest_campaign_is_never_the_default_and_never_gets_your_job_signalled(crafted):
    ws, log = crafted
    me = getpass.getuser()
    before = _states(ws)
    named = ws.campaign("cancel", ATTACKER)  # named: read, said as theirs, and its job is not signalled
    assert named.returncode == 0, named.stderr
    assert named.stdout == f"campaign {ATTACKER}: cancelled 0 point(s); 1 not signalled (their job is not tied to it)\n"
    assert named.stderr == (
        f"note: campaign {ATTACKER} is mallory's, not yours ({me})\n"
        f"warning: 1 point(s) not signalled, their job not tied to campaign {ATTACKER} (#0: job {VICTIM_JOB} is not "
        "signed with your key (submitted before campaign signed job ids, or not by you; if it is yours, stop it by "
        "hand))\n")
    assert not log.exists() and _states(ws) == before  # no scancel at all, nothing recorded

    status = ws.campaign("status")  # each read command given no campaign: the victim's own
    assert status.returncode == 0 and status.stdout.startswith(f"campaign {VICTIM}") and status.stderr == ""
    harvest = ws.campaign("harvest", "--table", "attempts", "--to", "json")
    assert harvest.returncode == 0 and harvest.stderr == ""
    assert [(r["idx"], r["job_id"]) for r in json.loads(harvest.stdout)] == [(0, VICTIM_JOB), (1, OLD_JOB)]
    plan = ws.campaign("plan")
    assert plan.stderr == (f"campaign {VICTIM}: no completed point to plan from yet (see campaign status "
                           f"{VICTIM})\n")
    report = ws.campaign("report", "--out", str(ws.path / "r.html"))
    assert report.returncode == 0, report.stderr
    page = (ws.path / "r.html").read_text()
    assert VICTIM in page and ATTACKER not in page

    mine = ws.campaign("cancel")  # no reference: the victim's own campaign, its signed job only
    assert mine.returncode == 0, mine.stderr
    assert mine.stdout == f"campaign {VICTIM}: cancelled 1 point(s); 1 not signalled (their job is not tied to it)\n"
    assert mine.stderr == (
        f"warning: 1 point(s) not signalled, their job not tied to campaign {VICTIM} (#1: job {OLD_JOB} has no "
        "signature (submitted before campaign signed job ids, or not by you; if it is yours, stop it by hand))\n")
    assert log.read_text() == f"-- {VICTIM_JOB}\n"  # once, for the victim's own signed job
    assert _states(ws) == {**before, (VICTIM, 0): "cancelled"}  # the crafted campaign untouched


def test_a_job_signature_binds_the_campaign_point_executor_and_folder():
    from campaign.common.signing import sign_job, verify_job

    key = b"k" * 32
    row = {"id": 7, "executor": "slurm", "job_id": "42", "job_folder": "/r/jobs/c"}
    signed = dict(row, job_signature=sign_job(key, "c", 7, "slurm", "42", "/r/jobs/c"))
    assert verify_job(key, "c", signed)
    for change in ({"id": 8}, {"executor": "local"}, {"job_id": "43"}, {"job_folder": "/x"}, {"job_signature": None}):
        assert not verify_job(key, "c", {**signed, **change}), change
    assert not verify_job(key, "other", signed) and not verify_job(b"j" * 32, "c", signed)


def test_with_no_campaign_of_yours_one_line_says_how_to_name_another(ws, tmp_path, monkeypatch):
    monkeypatch.setenv("CAMPAIGN_CONFIG_DIR", str(tmp_path / "attacker-config"))
    _register(ws, ATTACKER, time.time() - 1, tmp_path / "theirs", "mallory", [_row(0, state="completed")])
    monkeypatch.undo()
    for command in ("status", "report", "cancel"):  # (harvest and plan take theirs as these do: the test above)
        res = ws.campaign(command)
        assert res.returncode == 2 and res.stdout == "", (command, res.stdout + res.stderr)
        assert res.stderr == (f"error: no campaign of yours in {ws.db} (none is signed with your key); another's is "
                              f"read only when named: give its id or name (latest: {ATTACKER})\n"), command
    named = ws.campaign("status", ATTACKER)
    assert named.returncode == 0 and named.stdout.startswith(f"campaign {ATTACKER}")
    assert f"note: campaign {ATTACKER} is mallory's, not yours ({getpass.getuser()})\n" in named.stderr
    attempts = ws.campaign("harvest", ATTACKER, "--table", "attempts", "--to", "json")
    assert attempts.returncode == 0 and attempts.stderr == f"note: campaign {ATTACKER} is mallory's, not yours " \
                                                           f"({getpass.getuser()})\n"


def test_your_campaign_re_pointed_by_others_is_no_longer_taken_as_yours(ws):
    """The signature covers the results folder; the stored user must be yours: a campaign of
    yours someone re-pointed is named, not taken by default."""
    from campaign.store.mine import is_mine

    _register(ws, VICTIM, time.time() - 60, ws.results, getpass.getuser(), [_row(0, state="completed")])
    with open_store(ws.store_url, readonly=True) as s:
        assert is_mine(s, s.resolve_campaign(VICTIM)) and s.resolve_campaign(None)["id"] == VICTIM
    con = sqlite3.connect(ws.db)
    con.execute("update campaign set results_dir = '/elsewhere'")
    con.commit()
    con.close()
    with open_store(ws.store_url, readonly=True) as s:
        assert not is_mine(s, s.resolve_campaign(VICTIM))
    res = ws.campaign("status", VICTIM)
    assert res.returncode == 0 and f"note: campaign {VICTIM} {NOT_YOURS}\n" in res.stderr, res.stderr
