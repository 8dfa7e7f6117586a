"""The results store on PostgreSQL: the same campaign, through an SQLAlchemy URL.

Needs the private server of scripts/local-postgres.sh (started by .ci/run);
skipped with the reason when it is not running.
"""

from __future__ import annotations

import csv
import io
import os
import subprocess
import uuid
from contextlib import contextmanager
from typing import Iterator

import pytest

from conftest import TINY, campaign_id_from
from pg import drop_database

ADMIN_URL = os.environ.get("CAMPAIGN_TEST_PG", "postgresql+psycopg2://campaign:campaign@127.0.0.1:15432/campaign")

pytestmark = pytest.mark.postgres


@contextmanager
def fresh_database() -> Iterator[str]:
    """The URL of a new database on the test server, dropped afterwards; the test skipped,
    saying how to start one, when no server answers."""
    sqlalchemy = pytest.importorskip("sqlalchemy")
    pytest.importorskip("psycopg2")
    try:
        admin = sqlalchemy.create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            name = f"campaign_test_{uuid.uuid4().hex[:8]}"
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    except Exception as exc:  # no server: say how to start one
        pytest.skip(f"no PostgreSQL at {ADMIN_URL} ({type(exc).__name__}); start it with bash scripts/local-postgres.sh start")
    try:
        yield ADMIN_URL.rsplit("/", 1)[0] + "/" + name
    finally:
        drop_database(admin, name)
        admin.dispose()


@pytest.fixture
def pg_url():
    with fresh_database() as url:
        yield url


def test_campaign_end_to_end_on_postgresql(ws, pg_url):
    res = ws.launch("-m", "gpus=1,2", f"store.url={pg_url}", *TINY)
    assert res.returncode == 0, res.stderr
    cid = campaign_id_from(res.stdout)
    # the follow-up commands name the store, its password hidden (tests/test_launch_truth.py)
    assert f"--store '{pg_url.replace(':campaign@', ':***@')}'" in res.stdout and ":campaign@" not in res.stdout
    wait = ws.campaign("status", cid, "--store", pg_url, "--wait", "--interval", "0.5")
    assert wait.returncode == 0, wait.stdout + wait.stderr
    out = ws.campaign("harvest", cid, "--store", pg_url, "--to", "csv")
    rows = list(csv.DictReader(io.StringIO(out.stdout)))
    assert [r["gpus"] for r in rows] == ["1", "2"]
    assert float(rows[0]["speedup"]) == pytest.approx(1.0)
    assert not ws.db.exists()  # nothing went to the default SQLite store


def test_unreachable_database_is_one_line(ws):
    res = ws.campaign("status", "--store", "postgresql+psycopg2://nobody:x@127.0.0.1:1/none")
    assert res.returncode == 2
    assert res.stderr.startswith("error: cannot open results store") and res.stderr.count("\n") == 1
