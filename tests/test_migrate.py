"""A store written by the previous schema version (1: tests/golden/store/schema_v1.sql,
the DDL that version shipped) still opens: the read commands read it as it is and
leave it byte for byte, the first command that writes upgrades it in place, keeping
every row; the upgrade is additive, idempotent and survives a concurrent one. Its
points carry no signature (version 4): a resume refuses them, changing nothing."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from pathlib import Path

import pytest

from campaign.store import open_store
from campaign_sql.migrate import READABLE, STEPS, can_migrate, migrate
from campaign_sql.schema import SCHEMA_VERSION, attempt
from conftest import Workspace, point_config
from test_postgres import pg_url  # noqa: F401  (fixture: a fresh database on the test server)

V1_DDL = Path(__file__).parent / "golden" / "store" / "schema_v1.sql"
CID = "20260101-000000-aaaa"


def v1_store(path: Path) -> Path:
    """A version-1 store holding one campaign: point 0 completed (attempt 0, one rank
    row), point 1 failed with no attempt."""
    path.parent.mkdir(parents=True, exist_ok=True)
    config = point_config(f"results_dir={path.parent}", f"store.url=sqlite:///{path}")
    con = sqlite3.connect(path)
    con.executescript(V1_DDL.read_text())
    con.execute("insert into meta values ('schema_version', '1')")
    con.execute("insert into campaign (id, name, created_at, results_dir) values (?, 'old', ?, ?)",
                (CID, time.time() - 3600, str(path.parent)))
    for idx, state in ((0, "completed"), (1, "failed")):
        con.execute("insert into point (campaign_id, idx, platform, trainer, experiment, dataset, gpus, nodes, repeat, "
                    "batch_per_gpu, iterations, config, executor, job_id, state, reason, started_at, ended_at) "
                    "values (?, ?, 'local', 'synthetic', 'smoke', 'synthetic', 1, 1, 0, 4, 8, ?, 'local', ?, ?, ?, 1.0, 2.0)",
                    (CID, idx, json.dumps(config), str(100 + idx), state, None if idx == 0 else "rank 0: boom"))
    con.execute("insert into attempt (point_id, attempt_no, job_id, state, world_size, started_at, ended_at) "
                "values (1, 0, '100', 'completed', 1, 1.0, 2.0)")
    con.execute("insert into rank_timing (attempt_id, rank, iterations, wall_s, images, warmup_s) values (1, 0, 8, 2.0, 32, 0.5)")
    con.commit()
    con.close()
    return path


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _version(path: Path) -> str:
    con = sqlite3.connect(path)
    try:
        return con.execute("select value from meta where key = 'schema_version'").fetchone()[0]
    finally:
        con.close()


def test_every_older_readable_version_has_a_path_to_this_one():
    assert SCHEMA_VERSION in READABLE and all(can_migrate(v) for v in READABLE)
    assert set(STEPS) == set(range(min(READABLE), SCHEMA_VERSION))


def test_read_commands_read_a_v1_store_as_it_is_and_never_upgrade_it(tmp_path):
    ws = Workspace(tmp_path)
    db = v1_store(ws.db)
    before = _digest(db)
    # a v1 point has no signature: the campaign is nobody's own, read when named (issue #48)
    unnamed = ws.campaign("status")
    assert unnamed.returncode == 2 and unnamed.stderr == (
        f"error: no campaign of yours in {ws.db} (none is signed with your key); another's is read only when named: "
        f"give its id or name (latest: {CID})\n")
    status = ws.campaign("status", CID, "--json")
    assert status.returncode == 0, status.stderr
    assert status.stderr == (f"note: campaign {CID} is not yours: its points are not signed with your key (another "
                             "user's, or launched with another key or before campaign signed points)\n")
    doc = json.loads(status.stdout)
    assert [(p["state"], p["attempts"]) for p in doc["points"]] == [("completed", 1), ("failed", 0)]
    attempts = ws.campaign("harvest", CID, "--table", "attempts", "--to", "json")
    assert attempts.returncode == 0, attempts.stderr
    rows = json.loads(attempts.stdout)
    assert [(r["idx"], r["attempt"], r["state"]) for r in rows] == [(0, 0, "completed"), (1, None, "failed")]
    assert ws.campaign("harvest", CID, "--to", "csv").returncode == 0
    assert _digest(db) == before and _version(db) == "1"


def test_a_writing_open_upgrades_in_place_keeping_every_row(tmp_path):
    db = v1_store(tmp_path / "c.db")
    with open_store(f"sqlite:///{db}") as store:
        assert store.version == SCHEMA_VERSION
        points = store.points(CID)
        assert [p["state"] for p in points] == ["completed", "failed"]
        assert points[0]["attempt_state"] == "completed" and points[0]["retries"] == 0
        (row,) = store.attempts(CID)
        assert row["origin"] is None and row["job_id"] == "100"
    assert _version(db) == str(SCHEMA_VERSION)
    con = sqlite3.connect(db)
    cols = {r[1] for r in con.execute("pragma table_info(attempt)")}
    assert {"origin", "overrides", "submitted_at", "node_list"} <= cols
    assert {"signature", "job_signature"} <= {r[1] for r in con.execute("pragma table_info(point)")}
    assert con.execute("select count(*) from point where signature is null").fetchone() == (2,)
    # version 6: the jobs recorded before it stay unsigned (campaign cancel never signals them)
    assert con.execute("select count(*) from point where job_signature is null").fetchone() == (2,)
    assert con.execute("select count(*) from rank_timing").fetchone() == (1,)
    con.close()


def test_an_upgrade_runs_once_even_when_two_commands_race(tmp_path):
    db = v1_store(tmp_path / "c.db")
    with open_store(f"sqlite:///{db}", readonly=True) as reader:
        assert reader.version == 1
    from campaign_sql.engine import make_engine

    first, second = make_engine(f"sqlite:///{db}"), make_engine(f"sqlite:///{db}")
    assert migrate(first) == list(range(1, SCHEMA_VERSION))
    assert migrate(second) == []  # already there: nothing to do, no error
    STEPS[1](second.connect())  # a step run again adds nothing (columns already there)
    first.dispose()
    second.dispose()
    assert _version(db) == str(SCHEMA_VERSION)


def test_resume_refuses_the_unsigned_points_of_a_v1_store_and_changes_nothing(tmp_path):
    """A v1 point was stored before launches signed points: a resume (dry run or not) cannot
    tell it from one another user wrote, refuses it in one line and leaves the store as it
    was, un-upgraded."""
    ws = Workspace(tmp_path)
    v1_store(ws.db)
    before = _digest(ws.db)
    for argv in (["--dry-run"], []):
        res = ws.campaign("resume", CID, *argv)  # no campaign of yours: it is named
        assert res.returncode == 2 and res.stdout == "", res.stdout + res.stderr
        assert res.stderr == (f"note: campaign {CID} is not yours: its points are not signed with your key (another "
                              "user's, or launched with another key or before campaign signed points)\n"
                              "error: point #1: its stored config is not signed with your key (changed in the store "
                              "since launch, launched by another user, or launched before campaign signed configs); "
                              "nothing was submitted: launch it anew\n")
    assert _digest(ws.db) == before and _version(ws.db) == "1"


def test_resume_upgrades_a_v1_store_and_records_the_earlier_run_as_an_attempt(tmp_path):
    """The v1 point that failed (no attempt of its own) is taken for a resubmission: the
    store is upgraded, the failed run kept as attempt 0 and the new one is attempt 1."""
    ws = Workspace(tmp_path)
    v1_store(ws.db)
    with open_store(f"sqlite:///{ws.db}") as store:
        (p,) = [p for p in store.points(CID) if p["idx"] == 1]
        from campaign.observe.state import effective_points

        eff = [q for q in effective_points(store, store.resolve_campaign(CID))[0] if q["idx"] == 1][0]
        assert store.claim(eff)
        assert not store.claim(eff)  # taken: a second resume of the same point gets nothing
        numbers = store.open_attempts([p["id"]], origin="resume", overrides=["platform.time_limit_min=5"])
        assert numbers == {p["id"]: 1}
        rows = store.attempts(CID)
    assert [(r["idx"], r["attempt_no"], r["state"], r["origin"]) for r in rows] == [
        (0, 0, "completed", None), (1, 0, "failed", None), (1, 1, "registered", "resume")]
    assert rows[1]["reason"] == "rank 0: boom" and rows[1]["job_id"] == "101"
    assert rows[2]["overrides"] == ["platform.time_limit_min=5"]


@pytest.mark.parametrize("bad", ["0", "banana"])
def test_a_version_with_no_path_is_still_refused(tmp_path, bad):
    db = v1_store(tmp_path / "c.db")
    con = sqlite3.connect(db)
    con.execute("update meta set value = ? where key = 'schema_version'", (bad,))
    con.commit()
    con.close()
    from campaign.common.errors import SchemaVersionError

    for readonly in (True, False):
        with pytest.raises(SchemaVersionError, match=f"has schema version {bad}, this campaign needs"):
            open_store(f"sqlite:///{db}", readonly=readonly)
    assert attempt.c.origin is not None


@pytest.mark.postgres
def test_a_v1_store_on_postgresql_is_read_then_upgraded(pg_url):  # noqa: F811
    """The same on PostgreSQL: the v1 shape (version 2's columns dropped), read as it is by
    a read-only session, upgraded in place by a writing open (ALTER TABLE in the server's
    own types): version 4's point.signature included."""
    from sqlalchemy import create_engine, inspect

    with open_store(pg_url, create=True) as store:
        store.register({"id": CID, "created_at": 1.0}, [
            dict(idx=0, platform="local", trainer="synthetic", experiment="smoke", dataset="synthetic", gpus=1,
                 nodes=1, repeat=0, executor="local", state="failed", reason="boom")])
    engine = create_engine(pg_url)
    with engine.begin() as conn:
        for column in ("origin", "overrides", "submitted_at", "node_list"):
            conn.exec_driver_sql(f"ALTER TABLE attempt DROP COLUMN {column}")
        conn.exec_driver_sql("ALTER TABLE point DROP COLUMN signature")
        conn.exec_driver_sql("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    with open_store(pg_url, readonly=True) as reader:
        assert reader.version == 1 and reader.points(CID)[0]["attempts"] == 0
    with open_store(pg_url) as store:
        assert store.version == SCHEMA_VERSION
        pid = store.points(CID)[0]["id"]
        assert store.open_attempts([pid], origin="resume", overrides=["a=1"]) == {pid: 0}
        assert store.attempts(CID)[0]["overrides"] == ["a=1"]
    assert {"origin", "overrides", "submitted_at", "node_list"} <= {c["name"] for c in inspect(engine).get_columns("attempt")}
    assert "signature" in {c["name"] for c in inspect(engine).get_columns("point")}
    engine.dispose()


def test_a_v3_store_is_read_without_signatures_then_upgraded_to_v4(tmp_path):
    """Version 3 -> 4 adds point.signature alone: a read-only open reads the v3 points (no
    signature column), a writing one adds the column, keeping every point unsigned."""
    db = v1_store(tmp_path / "c.db")
    from campaign_sql.engine import make_engine

    engine = make_engine(f"sqlite:///{db}")
    for version in (1, 2):
        with engine.begin() as conn:
            STEPS[version](conn)
            conn.exec_driver_sql(f"update meta set value = '{version + 1}' where key = 'schema_version'")
    engine.dispose()
    assert _version(db) == "3"
    with open_store(f"sqlite:///{db}", readonly=True) as reader:
        assert reader.version == 3
        assert [("signature" in p, p["state"]) for p in reader.points(CID)] == [(False, "completed"), (False, "failed")]
    with open_store(f"sqlite:///{db}") as store:
        assert store.version == SCHEMA_VERSION >= 4
        assert [p["signature"] for p in store.points(CID)] == [None, None]
    assert _version(db) == str(SCHEMA_VERSION)
