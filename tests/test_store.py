"""The results store: schema, version check, idempotent writes, real SQLite."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from campaign.common.errors import NotFoundError, SchemaVersionError, StoreError
from campaign.store import open_store
from campaign_sql.engine import insert_ignore
from campaign_sql.render import render
from campaign_sql.schema import SCHEMA_VERSION, iteration

ROOT = Path(__file__).resolve().parents[1]


def _point(idx, **kw):
    row = dict(idx=idx, platform="local", trainer="synthetic", experiment="smoke", dataset="synthetic",
               gpus=1, nodes=1, repeat=0, executor="local", state="registered")
    row.update(kw)
    return row


def test_schema_sql_is_the_rendering_of_schema_py():
    assert (ROOT / "sql" / "schema.sql").read_text() == render(), "run: python -m campaign_sql.render > sql/schema.sql"


def test_open_missing_store_without_create_is_refused(tmp_path):
    with pytest.raises(StoreError, match="no results store at .*launch a campaign first"):
        open_store(f"sqlite:///{tmp_path}/none.db")
    assert not (tmp_path / "none.db").exists()


def test_register_and_read_back(tmp_path):
    with open_store(f"sqlite:///{tmp_path}/r/c.db", create=True) as s:
        ids = s.register({"id": "20260101-000000-aaaa", "created_at": time.time(), "name": "demo"},
                         [_point(0), _point(1, gpus=2)])
        assert len(ids) == 2
        s.mark_submitted([{"point_id": ids[0], "job_id": "42", "job_folder": "/x", "log_path": "/x/42.err"}])
        pts = s.points("20260101-000000-aaaa")
        assert [p["state"] for p in pts] == ["pending", "registered"]
        assert pts[0]["job_id"] == "42" and pts[1]["gpus"] == 2
        assert s.resolve_campaign(None)["id"] == "20260101-000000-aaaa"
        assert s.resolve_campaign("20260101")["id"] == "20260101-000000-aaaa"
        assert s.resolve_campaign("demo")["id"] == "20260101-000000-aaaa"
        with pytest.raises(NotFoundError, match="no campaign 'zzz'"):
            s.resolve_campaign("zzz")


def test_an_unknown_campaign_lists_names_with_ids_and_suggests_the_closest(tmp_path):
    url = f"sqlite:///{tmp_path}/c.db"
    with open_store(url, create=True) as s:
        s.register({"id": "20260101-000000-aaaa", "created_at": time.time() - 20, "name": "main-job"}, [_point(0)])
        s.register({"id": "20260101-000100-bbbb", "created_at": time.time() - 10, "name": "opt"}, [_point(0)])
        with pytest.raises(NotFoundError) as typo:
            s.resolve_campaign("mian-job")
        with pytest.raises(NotFoundError) as far:
            s.resolve_campaign("zzz")
    recent = "recent: opt (20260101-000100-bbbb), main-job (20260101-000000-aaaa)"
    assert str(typo.value) == (f"no campaign 'mian-job' in {tmp_path}/c.db; did you mean 'main-job' "
                               f"(20260101-000000-aaaa)?; {recent}")
    assert str(far.value) == f"no campaign 'zzz' in {tmp_path}/c.db; {recent}"


def test_state_moves_only_from_active_states(tmp_path):
    with open_store(f"sqlite:///{tmp_path}/c.db", create=True) as s:
        (pid,) = s.register({"id": "c", "created_at": 1.0}, [_point(0)])
        assert s.set_state(pid, "completed")
        assert not s.set_state(pid, "failed", "late")  # a final state is kept
        assert s.points("c")[0]["state"] == "completed"


def test_insert_ignore_is_idempotent(tmp_path):
    with open_store(f"sqlite:///{tmp_path}/c.db", create=True) as s:
        rows = [{"attempt_id": 1, "rank": 0, "iter": i, "warmup": False, "iter_s": 0.1} for i in range(3)]
        with s.engine.begin() as conn:
            conn.exec_driver_sql("PRAGMA foreign_keys=OFF")
            insert_ignore(conn, iteration, rows)
            insert_ignore(conn, iteration, rows)
            assert conn.exec_driver_sql("select count(*) from iteration").scalar() == 3


def test_newer_schema_names_the_upgrade(tmp_path):
    url = f"sqlite:///{tmp_path}/c.db"
    open_store(url, create=True).close()
    import sqlite3

    con = sqlite3.connect(tmp_path / "c.db")
    con.execute("update meta set value='9' where key='schema_version'")
    con.commit()
    con.close()
    with pytest.raises(SchemaVersionError) as err:
        open_store(url)
    # This install's own source, never `pip install -U campaign`: that is another project on PyPI.
    message = str(err.value)
    assert f"newer than this campaign's {SCHEMA_VERSION}; upgrade this install of campaign: git -C {ROOT} pull && " \
           f"pip install -U -e {ROOT} (the package named campaign on PyPI is another project)" in message
    assert "pip install -U campaign" not in message and "pip install campaign" not in message


def test_foreign_file_is_not_a_store(tmp_path):
    import sqlite3

    sqlite3.connect(tmp_path / "other.db").execute("create table t(x)").connection.commit()
    with pytest.raises(SchemaVersionError, match="is not a campaign results store"):
        open_store(f"sqlite:///{tmp_path}/other.db")


def test_launch_adds_an_index_an_older_store_lacks(tmp_path):
    import sqlite3

    url = f"sqlite:///{tmp_path}/c.db"
    open_store(url, create=True).close()
    con = sqlite3.connect(tmp_path / "c.db")
    con.execute("drop index ix_iteration_job")
    con.commit()
    open_store(url).close()  # reading leaves the store as it is
    assert not con.execute("select 1 from sqlite_master where name='ix_iteration_job'").fetchall()
    open_store(url, create=True).close()  # launching (create=True) adds it
    assert con.execute("select 1 from sqlite_master where name='ix_iteration_job'").fetchall()


def test_cancel_wins_over_the_failure_its_signal_caused(tmp_path):
    """campaign cancel signals, then marks cancelled: a failure the job reported after the
    signal (its interrupt) is the cancellation; one from before it stands."""
    with open_store(f"sqlite:///{tmp_path}/c.db", create=True) as s:
        early, late = s.register({"id": "c", "created_at": 1.0}, [_point(0), _point(1)])
        for pid, ended in ((early, 99.0), (late, 101.0)):
            s.set_state(pid, "failed", "rank 0: KeyboardInterrupt", ended_at=ended)
        assert not s.set_state(early, "cancelled", "cancelled by campaign cancel", failed_since=100.0)
        assert s.set_state(late, "cancelled", "cancelled by campaign cancel", failed_since=100.0)
        assert [(p["state"], p["reason"]) for p in s.points("c")] == [
            ("failed", "rank 0: KeyboardInterrupt"), ("cancelled", "cancelled by campaign cancel")]
