"""The forward migration that adds heartbeats (sql/migrate.py, the ``progress`` table): a
launch brings an older store to this schema in place, keeping what it holds; read commands
read an older store as it is (no progress) and change nothing; a store no migration
reaches is refused as before."""

from __future__ import annotations

import hashlib
import sqlite3
import time

import pytest
from sqlalchemy import inspect

from campaign.common.errors import SchemaVersionError
from campaign.store import open_store
from campaign_sql.migrate import READABLE, STEPS, can_migrate, migrate
from campaign_sql.schema import PROGRESS_SINCE, SCHEMA_VERSION


def _version_2_store(path) -> str:
    """A store as schema version 2 made it: today's, without the heartbeats' table."""
    url = f"sqlite:///{path}"
    with open_store(url, create=True) as s:
        s.register({"id": "20260101-000000-aaaa", "name": "old", "created_at": time.time() - 60},
                   [{"idx": 0, "platform": "local", "trainer": "sleep", "experiment": "weak_scaling",
                     "dataset": "synthetic", "gpus": 1, "nodes": 1, "executor": "local", "state": "completed",
                     "overrides": ["gpus=1"], "config": {}}])
    con = sqlite3.connect(path)
    con.execute("drop table progress")
    con.execute("update meta set value='2' where key='schema_version'")
    con.commit()
    con.close()
    return url


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_every_readable_version_has_its_steps():
    assert all(can_migrate(v) for v in READABLE) and SCHEMA_VERSION in READABLE
    assert PROGRESS_SINCE in READABLE and STEPS[PROGRESS_SINCE - 1].__doc__.startswith("Heartbeats")


def test_read_commands_read_an_older_store_as_it_is(tmp_path, ws):
    path = tmp_path / "old.db"
    url = _version_2_store(path)
    before = _digest(path)
    with open_store(url, readonly=True) as s:
        assert s.version == 2 and not s.has(PROGRESS_SINCE)
        assert s.resolve_campaign("old")["name"] == "old"  # unsigned (before version 4): named, never the default
    res = ws.campaign("status", "old", "--store", url)
    assert res.returncode == 0, res.stderr
    assert "completed" in res.stdout
    assert _digest(path) == before


def test_a_launch_migrates_an_older_store_in_place(tmp_path):
    path = tmp_path / "old.db"
    url = _version_2_store(path)
    with open_store(url, create=True) as s:
        assert s.version == SCHEMA_VERSION and s.has(PROGRESS_SINCE)
        assert inspect(s.engine).has_table("progress")
        assert [c["name"] for c in s.campaigns()] == ["old"]  # what it held is kept
        assert s.points("20260101-000000-aaaa")[0]["state"] == "completed"
    con = sqlite3.connect(path)
    assert con.execute("select value from meta where key='schema_version'").fetchone() == (str(SCHEMA_VERSION),)
    con.close()


def test_a_step_run_twice_changes_nothing(tmp_path):
    path = tmp_path / "old.db"
    url = _version_2_store(path)
    with open_store(url, create=True) as s:
        with s.engine.begin() as conn:
            STEPS[PROGRESS_SINCE - 1](conn)  # a second launch racing the first, or one that died half-way
        assert migrate(s.engine) == []


def test_a_store_no_migration_reaches_is_refused(tmp_path):
    path = tmp_path / "old.db"
    url = _version_2_store(path)
    con = sqlite3.connect(path)
    con.execute("update meta set value='0' where key='schema_version'")
    con.commit()
    con.close()
    for kwargs in ({}, {"readonly": True}, {"create": True}):
        with pytest.raises(SchemaVersionError, match=f"has schema version 0, this campaign needs {SCHEMA_VERSION}"):
            open_store(url, **kwargs)
