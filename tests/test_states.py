"""One state per point, the same everywhere: status (table and --json), harvest and
cancel derive it with one function (campaign.observe.state), read-only, and agree on every
point; on SQLite and PostgreSQL. Also: nothing executable from the store or the
results folder, control characters escaped on output."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import pickle
import time
from pathlib import Path

import pytest
from sqlalchemy import insert, select

from campaign.backends.base import Observed
from campaign.observe.state import derive
from campaign.observe.status import point_view
from campaign.store import open_store
from campaign_sql.schema import attempt, rank_timing
from conftest import point_config
from test_postgres import pg_url  # noqa: F401  (fixture: a fresh database on the test server)

CID = "20260101-000000-aaaa"
NOW = 1_000_000.0


def _row(idx, **kw):
    gpus = kw.get("gpus", 1)
    row = dict(idx=idx, platform="local", trainer="synthetic", experiment="smoke", dataset="synthetic", gpus=1,
               nodes=1, repeat=0, executor="local", state="running", iterations=8 // gpus, batch_per_gpu=4,
               job_id=None, job_folder=None, reason=None, log_path=None, config=point_config(f"gpus={gpus}"))
    row.update(kw)
    return row


def _p(**kw):
    """A row as Store.points gives it."""
    base = dict(id=1, idx=0, platform="local", gpus=1, trainer="synthetic", experiment="smoke", repeat=0,
                executor="local", state="running", reason=None, job_id="123", started_at=NOW - 100,
                ended_at=None, config={"platform": {"time_limit_min": 1}}, submitted_at=NOW - 200)
    base.update(kw)
    return base


# ---------------------------------------------------------------- derive (pure)

def test_the_store_final_state_is_kept():
    out = derive(_p(state="completed", ended_at=NOW - 10), Observed("failed", "late"), now=NOW)
    assert out["state"] == "completed" and out["stored_state"] == "completed"


def test_an_unfinished_point_takes_the_executors_view_with_its_end():
    out = derive(_p(), Observed("failed", "job ended without reporting results", ended_at=NOW - 50), now=NOW)
    assert (out["state"], out["reason"], out["ended_at"]) == ("failed", "job ended without reporting results", NOW - 50)
    assert out["stored_state"] == "running"


def test_a_point_the_job_says_runs_stays_running():
    assert derive(_p(), Observed("pending", "Priority"), now=NOW)["state"] == "running"
    assert derive(_p(state="pending"), Observed("pending", "Resources"), now=NOW)["reason"] == "Resources"


def test_spooled_results_make_a_spooled_point():
    out = derive(_p(), Observed("failed"), spooled=2, now=NOW)
    assert out["state"] == "spooled" and "2 spool file(s)" in out["reason"] and "campaign ingest" in out["reason"]


def test_a_point_never_submitted_is_lost_after_a_while():
    p = _p(state="registered", job_id=None)
    assert derive(p, None, now=NOW, registered_at=NOW - 10)["state"] == "registered"
    lost = derive(p, None, now=NOW, registered_at=NOW - 3600)
    assert lost["state"] == "lost" and "never handed to a scheduler" in lost["reason"]


def test_a_local_point_past_its_time_limit_is_timeout():
    reason = "rank 0: UncompletedJobError: Job not requeued because: timed-out and not checkpointable."
    out = derive(_p(state="failed", reason=reason, ended_at=NOW - 70), None, now=NOW)
    assert out["state"] == "timeout"
    assert out["reason"] == "time limit reached (platform.time_limit_min=1; a local job is stopped 30 s before it)"
    # interrupted at the limit (no warning reached rank 0 in Python): same
    assert derive(_p(state="failed", reason="rank 0: KeyboardInterrupt", started_at=NOW - 70, ended_at=NOW),
                  None, now=NOW)["state"] == "timeout"
    # failed early: failed
    assert derive(_p(state="failed", reason="rank 0: KeyboardInterrupt", started_at=NOW - 10, ended_at=NOW),
                  None, now=NOW)["state"] == "failed"


def test_a_local_job_without_process_or_log_is_starting_just_after_submission_lost_later(tmp_path):
    from campaign.backends.local import START_GRACE_S, ProcessTable, observe_job

    table = ProcessTable()
    gone = dict(_p(job_id="999999996", job_folder=str(tmp_path)), state="pending")
    fresh = observe_job(dict(gone, submitted_at=time.time()), table)
    assert (fresh.state, fresh.reason) == ("pending", "starting: no process or log of local job 999999996 seen yet")
    old = observe_job(dict(gone, submitted_at=time.time() - START_GRACE_S - 1), table)
    assert old.state == "lost" and old.reason.endswith(f"no log in {tmp_path}")
    (tmp_path / "controllers.log").write_text("Traceback (most recent call last):\n...\nOSError: no space\n")
    assert observe_job(gone, table).reason.endswith(f"; see {tmp_path / 'controllers.log'}")


def test_elapsed_of_an_ended_point_does_not_grow():
    ended = derive(_p(), Observed("failed", "x", ended_at=NOW - 40), now=NOW)
    assert point_view(ended, NOW)["elapsed_s"] == point_view(ended, NOW + 3600)["elapsed_s"] == 60
    unknown_end = derive(_p(), Observed("lost", "nothing answers"), now=NOW)
    assert point_view(unknown_end, NOW)["elapsed_s"] is None  # not "still counting"
    running = derive(_p(), Observed("running"), now=NOW)
    assert point_view(running, NOW + 10)["elapsed_s"] == 110


# ---------------------------------------------------------------- status, harvest, cancel agree

def _complete(conn, point_id, wall_s):
    conn.execute(insert(attempt), [dict(point_id=point_id, attempt_no=0, state="completed", started_at=NOW - 60,
                                        ended_at=NOW - 30)])
    aid = conn.execute(select(attempt.c.id).where(attempt.c.point_id == point_id)).scalar_one()
    conn.execute(insert(rank_timing), [dict(attempt_id=aid, rank=0, iterations=8, warmup_iterations=1, wall_s=wall_s,
                                            images=64, iter_mean_s=wall_s / 8, iter_median_s=wall_s / 8)])


def build(url: str, results: Path) -> dict:
    """A campaign whose points cover the read side's cases:
    0 completed (1 GPU); 1 completed (2 GPUs);
    2 failed in the store though its attempt completed (a store written by an older status,
      or an orphaned rank finishing late): failed, never harvested;
    3 running in the store, its local job gone with a traceback in its log: failed;
    4 running in the store, job gone, no log at all: lost;
    5 running in the store, its results in a spool file: spooled."""
    folder = results / "jobs" / CID
    folder.mkdir(parents=True)
    (folder / "spool").mkdir()
    gone = "999999999"  # no such process
    with open_store(url, create=True) as s:
        ids = s.register({"id": CID, "created_at": time.time(), "name": "demo", "results_dir": str(results)}, [
            _row(0, state="completed"), _row(1, gpus=2, state="completed"),
            _row(2, state="failed", reason="job process ended without a result (killed?); see its log"),
            _row(3, job_id=gone, job_folder=str(folder)), _row(4, job_id="999999998", job_folder=str(folder)),
            _row(5, job_id="999999997", job_folder=str(folder))])
        with s.engine.begin() as conn:
            _complete(conn, ids[0], 10.0)
            _complete(conn, ids[1], 6.0)
            _complete(conn, ids[2], 4.0)
    (folder / f"{gone}_0_log.err").write_text(
        "submitit INFO - Starting\nTraceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n"
        "    boom()\nRuntimeError: rank zero blew up\n")
    os.utime(folder / f"{gone}_0_log.err", (NOW, NOW))
    (folder / "spool" / f"p{ids[5]}-a0-r0.jsonl").write_text("")
    return {"ids": ids, "folder": folder}


EXPECTED = ["completed", "completed", "failed", "failed", "lost", "spooled"]


def _digest(path: Path):
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None


def _check_agreement(ws, url: str, db: Path | None):
    before = _digest(db) if db else None
    status = ws.campaign("status", "--store", url, "--json")
    assert status.returncode == 0, status.stderr
    doc = json.loads(status.stdout)
    assert [p["state"] for p in doc["points"]] == EXPECTED
    assert doc["points"][3]["reason"].startswith("rank 0: RuntimeError: rank zero blew up (the job ended without reporting it)")
    assert "nothing answers" in doc["points"][4]["reason"]
    assert doc["points"][3]["elapsed_s"] is None or doc["points"][3]["elapsed_s"] >= 0
    table = ws.campaign("status", "--store", url)
    assert "6 point(s): 2 completed, 1 spooled, 2 failed, 1 lost" in table.stdout, table.stdout
    harvest = ws.campaign("harvest", "--store", url, "--to", "csv")
    assert harvest.returncode == 0, harvest.stderr
    rows = list(csv.DictReader(io.StringIO(harvest.stdout)))
    completed = [p for p in doc["points"] if p["state"] == "completed"]
    assert sorted(int(r["gpus"]) for r in rows) == sorted(p["gpus"] for p in completed) == [1, 2]
    assert float(rows[1]["speedup"]) == pytest.approx(10.0 / 6.0)
    assert f"campaign {CID}: 2 of 6 point(s) completed; not harvested: 2 failed, 1 lost, 1 spooled" in harvest.stderr
    assert "1 point(s) have results waiting in spool files: run campaign ingest" in harvest.stderr
    if db:
        assert _digest(db) == before  # read commands wrote nothing


def test_status_and_harvest_agree_on_every_point_sqlite(ws):
    build(ws.store_url, ws.results)
    _check_agreement(ws, ws.store_url, ws.db)


@pytest.mark.postgres
def test_status_and_harvest_agree_on_every_point_postgresql(ws, pg_url):
    build(pg_url, ws.results)
    _check_agreement(ws, pg_url, None)


def test_harvest_with_nothing_completed_says_why(ws):
    build(ws.store_url, ws.results)
    import sqlite3

    con = sqlite3.connect(ws.db)
    con.execute("update point set state = 'failed' where idx < 2")
    con.commit()
    con.close()
    res = ws.campaign("harvest", "--to", "csv")
    assert res.returncode == 1 and "no completed point to harvest yet" in res.stderr


def test_cancel_leaves_ended_points_as_they_ended(ws):
    build(ws.store_url, ws.results)
    res = ws.campaign("cancel")
    assert res.returncode == 0 and res.stdout == f"campaign {CID}: cancelled 0 point(s)\n", res.stdout + res.stderr
    assert json.loads(ws.campaign("status", "--json").stdout)["points"][3]["state"] == "failed"


def test_ingest_records_what_the_executors_observed(ws):
    build(ws.store_url, ws.results)
    (spool,) = (ws.results / "jobs" / CID / "spool").glob("*.jsonl")
    spool.unlink()  # empty: nothing to fold in
    res = ws.campaign("ingest")
    assert res.returncode == 0, res.stderr
    assert "recorded the observed final state of 3 point(s)" in res.stdout
    assert ws.query("select state from point order by idx") == [(s,) for s in
                                                                ["completed", "completed", "failed", "failed", "lost", "lost"]]
    assert ws.query("select ended_at from point where idx = 3") == [(NOW,)]  # the log's time, not now


# ---------------------------------------------------------------- nothing executable from the store

class _Payload:
    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.slow
def test_a_planted_result_pickle_is_never_loaded(ws, tmp_path):
    """Whoever can write the store or the results folder must not run code as whoever
    reads it: every command leaves a malicious submitit result pickle unopened."""
    info = build(ws.store_url, ws.results)
    marker = tmp_path / "pwned"
    for job in ("999999999", "999999998", "999999997"):
        for task in (0, 1):
            (info["folder"] / f"{job}_{task}_result.pkl").write_bytes(pickle.dumps(_Payload(str(marker))))
    for argv in (["status"], ["status", "--json"], ["status", "--wait", "--timeout", "1"], ["harvest"],
                 ["harvest", "--to", "csv"], ["cancel"], ["ingest"]):
        ws.campaign(*argv)
        assert not marker.exists(), f"campaign {' '.join(argv)} unpickled a result file"
    from campaign.backends.slurm import SlurmBackend

    log = info["folder"] / "7_0_0_log.err"
    log.write_text("Traceback (most recent call last):\n  File \"x\"\nValueError: from the log\n")
    (info["folder"] / "7_0_0_result.pkl").write_bytes(pickle.dumps(_Payload(str(marker))))
    assert SlurmBackend._error_line({"job_folder": str(info["folder"]), "job_id": "7_0",
                                     "log_path": str(log)}) == "ValueError: from the log"
    assert not marker.exists()


def test_the_host_side_never_unpickles():
    root = Path(__file__).resolve().parents[1] / "campaign"
    for path in root.rglob("*.py"):
        text = path.read_text()
        assert "pickle.load" not in text and "cloudpickle" not in text and ".result()" not in text, path


# ---------------------------------------------------------------- control characters

HOSTILE = "x\x1b]0;owned\x07\x1b[2J\u202e"


def test_control_characters_are_escaped_on_output(ws):
    with open_store(ws.store_url, create=True) as s:
        (pid,) = s.register({"id": CID, "created_at": time.time(), "name": f"demo{HOSTILE}"},
                            [_row(0, state="failed", reason=f"rank 0: ValueError: bad {HOSTILE}",
                                  log_path=f"/tmp/{HOSTILE}_0_log.err", platform=f"p{HOSTILE}")])
    outputs = [ws.campaign("status"), ws.campaign("status", "--wait", "--timeout", "1"), ws.campaign("cancel"),
               ws.campaign("harvest"), ws.campaign("status", f"nosuch{HOSTILE}")]
    for res in outputs:
        for text in (res.stdout, res.stderr):
            assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text, text
    status = outputs[0].stdout
    assert "demo" + r"x\x1b]0;owned\x07\x1b[2J\u202e" in status
    assert r"ValueError: bad x\x1b]0;owned" in status and r"(log: /tmp/x\x1b]0;owned" in status
    assert r"error: no campaign 'nosuch" in outputs[-1].stderr and outputs[-1].stderr.count("\n") == 1
    doc = json.loads(ws.campaign("status", "--json").stdout)  # JSON keeps the data, escaped by JSON itself
    assert doc["campaign"]["name"] == f"demo{HOSTILE}"


# ---------------------------------------------------------------- ingest: malformed spool files

def _spool_line(op, point_id, payload, attempt_no=0):
    return json.dumps({"op": op, "point_id": point_id, "attempt_no": attempt_no, "payload": payload}) + "\n"


def _check_quarantine(ws, url: str):
    info = build(url, ws.results)
    spool = info["folder"] / "spool"
    for f in spool.glob("*.jsonl"):
        f.unlink()
    pid = info["ids"][5]
    good = (_spool_line("start", pid, {"job_id": "1", "world_size": 1, "started_at": NOW - 5, "provenance": {}})
            + _spool_line("finish", pid, {"state": "failed", "reason": "rank 0: from the spool", "ended_at": NOW - 1})
            + '{"op": "rows", "point_id": ')  # cut short by a killed job: ingested without it
    (spool / f"p{pid}-a0-r0.jsonl").write_text(good)
    bad = {
        f"p{pid}-a0-r1.jsonl": "not json\n" + _spool_line("finish", pid, {"state": "completed", "reason": None,
                                                                          "ended_at": NOW}),
        f"p{pid}-a0-r2.jsonl": _spool_line("explode", pid, {}),
        f"p{pid}-a0-r3.jsonl": _spool_line("rows", pid, {"table": "sqlite_master", "rank": 0, "rows": []}),
        "p999-a0-r0.jsonl": _spool_line("start", 999999, {"job_id": "1", "world_size": 1, "started_at": 1.0,
                                                          "provenance": {}}),  # no such point
        f"p{pid}-a0-r4.jsonl": b"\xff\xfe binary\n",
    }
    for name, text in bad.items():
        (spool / name).write_bytes(text if isinstance(text, bytes) else text.encode())
    res = ws.campaign("ingest", "--store", url)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "Traceback" not in res.stderr
    # r1's first line is not JSON: kept alone in its .bad, its finish applied (test_edges holds the wording)
    assert res.stdout.startswith("ingested 2 spool file(s), 3 operation(s)") and "quarantined 5 malformed file(s)" in res.stdout
    warnings = res.stderr.splitlines()
    assert len(warnings) == 5 and all(w.startswith("warning: ") for w in warnings), res.stderr
    assert sum("renamed to" in w for w in warnings) == 4 and sum("kept in" in w for w in warnings) == 1, res.stderr
    assert sorted(p.name for p in spool.iterdir()) == sorted([f"p{pid}-a0-r0.jsonl.ingested",
                                                              f"p{pid}-a0-r1.jsonl.ingested"]
                                                             + [n + ".bad" for n in bad])
    doc = json.loads(ws.campaign("status", "--store", url, "--json").stdout)
    assert doc["points"][5]["state"] == "failed" and doc["points"][5]["reason"].startswith("rank 0: from the spool")


def test_a_malformed_spool_file_is_quarantined_and_the_rest_ingested_sqlite(ws):
    _check_quarantine(ws, ws.store_url)


@pytest.mark.postgres
def test_a_malformed_spool_file_is_quarantined_and_the_rest_ingested_postgresql(ws, pg_url):  # noqa: F811
    _check_quarantine(ws, pg_url)
