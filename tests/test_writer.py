"""The job-side writer under contention: 16 concurrent writers, back-off, spool, ingest."""

from __future__ import annotations

import multiprocessing as mp
import sqlite3
import time

import pytest

from campaign.observe.ingest import ingest_files
from campaign.store import open_store
from campaign_sql.ops import AttemptKey, apply_op
from trainers.writer import JobWriter

N_WRITERS = 16
ROWS = 1500


def _points(n):
    return [dict(idx=i, platform="local", trainer="synthetic", experiment="smoke", dataset="synthetic", gpus=1,
                 nodes=1, repeat=0, executor="local", state="pending") for i in range(n)]


def _rows(n):
    return [{"iter": i, "warmup": i < 2, "iter_s": 0.01 + i * 1e-6, "loss": 1.0 / (i + 1)} for i in range(n)]


def _summary():
    return {"iterations": ROWS - 2, "warmup_iterations": 2, "wall_s": 1.0, "images": 8}


def _write(url, point_id, barrier):
    import trainers.writer as w

    w.BATCH_ROWS = 100  # many short transactions: real contention
    writer = JobWriter(url, busy_timeout_s=60)
    barrier.wait()
    key = writer.start_attempt(point_id, job_id=str(point_id), world_size=1, provenance={})
    writer.write_rank(key, 0, _summary(), _rows(ROWS))
    writer.finish_attempt(key, point_id, "completed")
    writer.close()


@pytest.mark.slow
def test_sixteen_concurrent_writers_lose_and_double_nothing(tmp_path):
    url = f"sqlite:///{tmp_path}/c.db"
    with open_store(url, create=True) as s:
        ids = s.register({"id": "c", "created_at": 1.0}, _points(N_WRITERS))
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(N_WRITERS)
    procs = [ctx.Process(target=_write, args=(url, pid, barrier)) for pid in ids]
    for p in procs:
        p.start()
    for p in procs:
        p.join(300)
    assert [p.exitcode for p in procs] == [0] * N_WRITERS
    con = sqlite3.connect(tmp_path / "c.db")
    assert con.execute("select count(*) from iteration").fetchone()[0] == N_WRITERS * ROWS
    assert con.execute("select count(distinct attempt_id) from iteration").fetchone()[0] == N_WRITERS
    assert con.execute("select count(*) from rank_timing").fetchone()[0] == N_WRITERS
    assert con.execute("select state, count(*) from point group by state").fetchall() == [("completed", N_WRITERS)]


def test_locked_store_spools_and_is_ingested_exactly_once(tmp_path):
    url = f"sqlite:///{tmp_path}/c.db"
    with open_store(url, create=True) as s:
        (pid,) = s.register({"id": "c", "created_at": 1.0, "results_dir": str(tmp_path)}, _points(1))
    spool = tmp_path / "jobs" / "c" / "spool"
    writer = JobWriter(url, busy_timeout_s=0.3, spool_dir=str(spool))
    key = writer.start_attempt(pid, job_id="1", world_size=1, provenance={"host": "h"})  # reaches the store
    lock = sqlite3.connect(tmp_path / "c.db", timeout=0)
    lock.execute("BEGIN EXCLUSIVE")  # another process holds the database past the writer's timeout
    t0 = time.monotonic()
    writer.write_rank(key, 0, _summary(), _rows(50))
    writer.finish_attempt(key, pid, "completed")
    assert time.monotonic() - t0 < 120  # backed off, then spooled: did not wait forever (a hang check, not a speed test)
    lock.rollback()
    lock.close()
    files = list(spool.glob("*.jsonl"))
    assert len(files) == 1 and writer.spool_path == files[0]
    con = sqlite3.connect(tmp_path / "c.db")
    assert con.execute("select count(*) from iteration").fetchone()[0] == 0
    with open_store(url) as s:
        assert ingest_files(s, files) == (1, 3)  # rows, rank, finish
    assert con.execute("select count(*) from iteration").fetchone()[0] == 50
    assert con.execute("select state from point").fetchone()[0] == "completed"
    assert not files[0].exists() and files[0].with_name(files[0].name + ".ingested").exists()
    # A second ingest finds nothing; replaying the same records again changes nothing.
    with open_store(url) as s:
        assert ingest_files(s, spool.glob("*.jsonl")) == (0, 0)
        import json

        records = [json.loads(line) for line in files[0].with_name(files[0].name + ".ingested").read_text().splitlines()]
        with s.engine.begin() as conn:
            for r in records:
                apply_op(conn, r["op"], AttemptKey(r["point_id"], r["attempt_no"]), r["payload"], {})
    assert con.execute("select count(*) from iteration").fetchone()[0] == 50
    assert con.execute("select count(*) from attempt").fetchone()[0] == 1


@pytest.mark.slow
def test_ingest_command(ws):
    """`campaign ingest` on a campaign without spool files: nothing to do, exit 0."""
    from conftest import TINY

    assert ws.launch("-m", "gpus=1", *TINY).returncode == 0
    ws.campaign("status", "--wait", "--interval", "0.5")
    res = ws.campaign("ingest")
    assert res.returncode == 0 and "ingested 0 spool file(s)" in res.stdout


@pytest.mark.slow
def test_spooled_results_wait_for_ingest_and_harvest_never_writes(ws):
    """A job whose store was locked past its timeout spools. status and harvest say so
    (state ``spooled``; harvest counts it as not completed) and change nothing;
    `campaign ingest` folds it in, exactly once."""
    from conftest import TINY  # noqa: F401

    import hashlib
    import sqlite3

    res = ws.launch("-m", "gpus=1", "store.busy_timeout_s=0.5", "experiment.base_iterations=400",
                    "trainer.params.width=4", "dataset.image_size=8")
    assert res.returncode == 0, res.stderr
    # Lock the store while the job runs (from after it started until after it ended).
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and ws.query("select state from point")[0][0] != "running":
        time.sleep(0.1)
    lock = sqlite3.connect(ws.db, timeout=30, check_same_thread=False)
    lock.execute("BEGIN EXCLUSIVE")
    spool = next(ws.results.glob("jobs/*/")) / "spool"
    while time.monotonic() < deadline and not list(spool.glob("*.jsonl")):
        time.sleep(0.2)
    time.sleep(3)  # let the job finish writing its spool
    lock.rollback()
    lock.close()
    wait = ws.campaign("status", "--wait", "--interval", "0.5", "--timeout", "120")
    assert wait.returncode == 1 and "1 point(s): 1 spooled" in wait.stdout, wait.stdout + wait.stderr
    assert "run campaign ingest" in wait.stdout
    digest = hashlib.sha256(ws.db.read_bytes()).hexdigest()
    out = ws.campaign("harvest", "--to", "csv")
    assert out.returncode == 1, out.stderr
    assert "1 point(s) have results waiting in spool files: run campaign ingest" in out.stderr
    assert hashlib.sha256(ws.db.read_bytes()).hexdigest() == digest  # harvest read, wrote nothing
    assert ws.query("select count(*) from iteration")[0][0] == 0 and list(spool.glob("*.jsonl"))
    ing = ws.campaign("ingest")
    assert ing.returncode == 0 and "ingested 1 spool file(s)" in ing.stdout, ing.stdout + ing.stderr
    assert ws.query("select state from point")[0][0] == "completed"
    assert ws.query("select count(*) from iteration")[0][0] == 400 + 5
    again = ws.campaign("harvest", "--to", "csv")
    assert again.returncode == 0 and "spool" not in again.stderr
    assert ws.campaign("ingest").stdout.startswith("ingested 0 spool file(s)")
    assert ws.query("select count(*) from iteration")[0][0] == 405


@pytest.mark.parametrize("order", [(1, 0), (0, 1)])
def test_the_earliest_rank_failure_is_the_reason_whatever_order_it_arrives_in(tmp_path, order):
    """Rank 1 fails first; rank 0 fails later (its peer is gone). Applied in either order
    (live, or spool files ingested by name), the stored reason is rank 1's; replays change nothing."""
    url = f"sqlite:///{tmp_path}/c.db"
    with open_store(url, create=True) as s:
        (pid,) = s.register({"id": "c", "created_at": 1.0}, _points(1))
    writer = JobWriter(url)
    key = writer.start_attempt(pid, job_id="1", world_size=2, provenance={})
    writer.close()
    reports = {1: {"state": "failed", "reason": "rank 1: RuntimeError: boom", "ended_at": 100.0},
               0: {"state": "failed", "reason": "rank 0: RuntimeError: Connection closed by peer", "ended_at": 101.0}}
    with open_store(url) as s:
        for rank in order + order:  # each twice: replays
            with s.engine.begin() as conn:
                apply_op(conn, "finish", key, reports[rank], {})
    con = sqlite3.connect(tmp_path / "c.db")
    expected = ("failed", "rank 1: RuntimeError: boom", 100.0)
    assert con.execute("select state, reason, ended_at from attempt").fetchone() == expected
    assert con.execute("select state, reason, ended_at from point").fetchone() == expected


def test_a_late_report_of_an_earlier_attempt_leaves_the_resubmitted_point_alone(tmp_path):
    """Rank 0 of attempt 0 reports its failure after the point was resubmitted (attempt 1
    running): attempt 0 records it, the point keeps following attempt 1; a late start of
    attempt 0 (a spool file ingested late) does not move the point either."""
    url = f"sqlite:///{tmp_path}/c.db"
    with open_store(url, create=True) as s:
        (pid,) = s.register({"id": "c", "created_at": 1.0}, _points(1))
    writer = JobWriter(url)
    first = writer.start_attempt(pid, job_id="1", world_size=2, provenance={}, attempt_base=0)
    writer.finish_attempt(first, pid, "failed", "rank 1: RuntimeError: boom", rank=1)
    with open_store(url) as s:
        row = next(p for p in s.points("c"))
        assert s.claim(dict(row, stored_state=row["state"]))
        assert s.open_attempts([pid], origin="retry") == {pid: 1}
        s.mark_submitted([{"point_id": pid, "job_id": "2", "attempt_no": 1}])
    second = writer.start_attempt(pid, job_id="2", world_size=2, provenance={}, attempt_base=1)
    assert second.attempt_no == 1
    writer.finish_attempt(first, pid, "failed", "rank 0: Connection closed by peer", rank=0)  # late
    with open_store(url) as s, s.engine.begin() as conn:  # attempt 0's start replayed from a spool file
        apply_op(conn, "start", first, {"job_id": "1", "world_size": 2, "started_at": 5.0, "provenance": {}}, {})
    con = sqlite3.connect(tmp_path / "c.db")
    assert con.execute("select state, job_id from point").fetchone() == ("running", "2")
    assert con.execute("select attempt_no, state from attempt order by attempt_no").fetchall() == [
        (0, "failed"), (1, "running")]
    writer.finish_attempt(second, pid, "completed")
    assert con.execute("select state from point").fetchone() == ("completed",)
    writer.close()
