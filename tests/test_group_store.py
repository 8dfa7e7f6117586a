"""A group's shared PostgreSQL store (sql/postgres_group.sql, docs/security.md): every
member reads every campaign and writes only their own, decided by the database.

Needs the private server of scripts/local-postgres.sh (trust authentication for its
superuser on loopback, as set up there); skipped with the reason when it is not running.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest

from conftest import TINY, campaign_id_from
from pg import drop_database

pytestmark = pytest.mark.postgres

SERVER = os.environ.get("CAMPAIGN_TEST_PG_SERVER", "postgresql+psycopg2://postgres@127.0.0.1:15432")


def _url(role: str, db: str) -> str:
    return SERVER.replace("://postgres@", f"://{role}:pw@") + "/" + db


@pytest.fixture
def group():
    """A fresh database owned by an admin role, a group role and two members (alice, bob)."""
    sqlalchemy = pytest.importorskip("sqlalchemy")
    pytest.importorskip("psycopg2")
    tag = uuid.uuid4().hex[:8]
    names = {k: f"{k}_{tag}" for k in ("admin", "members", "alice", "bob")}
    db = f"campaign_group_{tag}"
    try:
        su = sqlalchemy.create_engine(SERVER + "/postgres", isolation_level="AUTOCOMMIT")
        with su.connect() as conn:
            conn.exec_driver_sql(f"CREATE ROLE {names['admin']} LOGIN PASSWORD 'pw'")
            conn.exec_driver_sql(f"CREATE ROLE {names['members']} NOLOGIN")
            for m in ("alice", "bob"):
                conn.exec_driver_sql(f"CREATE ROLE {names[m]} LOGIN PASSWORD 'pw' IN ROLE {names['members']}")
            conn.exec_driver_sql(f'CREATE DATABASE "{db}" OWNER {names["admin"]}')
            # (PostgreSQL 15+: only the owner may create in public, which is what a group store wants)
    except Exception as exc:
        pytest.skip(f"no PostgreSQL superuser at {SERVER} ({type(exc).__name__}); "
                    "start it with bash scripts/local-postgres.sh start")
    yield {k: _url(v, db) for k, v in names.items() if k != "members"} | {"group": names["members"], "roles": names}
    drop_database(su, db)
    with su.connect() as conn:
        for k in ("alice", "bob", "members", "admin"):
            conn.exec_driver_sql(f"DROP ROLE IF EXISTS {names[k]}")
    su.dispose()


def _make_group(url: str, group: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "campaign_sql.group", "--store", url, "--group", group],
                          capture_output=True, text=True, timeout=120)


def _sql(url: str, statement: str, **params):
    import sqlalchemy

    engine = sqlalchemy.create_engine(url)
    try:
        with engine.begin() as conn:
            res = conn.execute(sqlalchemy.text(statement), params)
            return res.rowcount if not res.returns_rows else res.fetchall()
    finally:
        engine.dispose()


def test_members_read_every_campaign_and_write_only_their_own(ws, group):
    made = _make_group(group["admin"], group["group"])
    assert made.returncode == 0, made.stderr
    assert made.stdout.startswith("created the tables and made the store a group store")
    assert _make_group(group["admin"], group["group"]).returncode == 0  # again: harmless

    # alice runs a real campaign into the group store, as a member
    res = ws.launch("-m", "gpus=1,2", f"store.url={group['alice']}", *TINY)
    assert res.returncode == 0, res.stderr
    cid = campaign_id_from(res.stdout)
    wait = ws.campaign("status", cid, "--store", group["alice"], "--wait", "--interval", "0.5")
    assert wait.returncode == 0, wait.stdout + wait.stderr
    # the database, not the client, says whose campaign it is
    assert _sql(group["admin"], "SELECT \"user\" FROM campaign WHERE id = :c", c=cid) == [(group["roles"]["alice"],)]

    # bob reads it all ...
    harvest = ws.campaign("harvest", cid, "--store", group["bob"], "--to", "csv")
    assert harvest.returncode == 0, harvest.stderr
    assert len(harvest.stdout.strip().splitlines()) == 3
    before = _sql(group["admin"], "SELECT state, reason FROM point WHERE campaign_id = :c ORDER BY idx", c=cid)
    times = _sql(group["admin"], "SELECT wall_s FROM rank_timing ORDER BY attempt_id, rank")

    # ... and can change none of it: updates match no row, inserts are refused
    assert _sql(group["bob"], "UPDATE point SET state = 'failed', reason = 'x' WHERE campaign_id = :c", c=cid) == 0
    assert _sql(group["bob"], "UPDATE rank_timing SET wall_s = 9999") == 0
    assert _sql(group["bob"], "UPDATE campaign SET created_at = 4102444800 WHERE id = :c", c=cid) == 0
    import sqlalchemy

    aid = _sql(group["admin"], "SELECT min(id) FROM attempt")[0][0]
    with pytest.raises(sqlalchemy.exc.ProgrammingError, match="row-level security"):
        _sql(group["bob"], "INSERT INTO rank_timing (attempt_id, rank, wall_s) VALUES (:a, 99, 1.0)", a=aid)
    with pytest.raises(sqlalchemy.exc.ProgrammingError, match="row-level security"):
        _sql(group["bob"], "INSERT INTO point (campaign_id, idx, platform, trainer, experiment, dataset, gpus, nodes, "
                           "repeat, executor, state) VALUES (:c, 99, 'local', 'sleep', 'e', 'd', 1, 1, 0, 'local', "
                           "'registered')", c=cid)
    with pytest.raises(sqlalchemy.exc.ProgrammingError, match="permission denied"):
        _sql(group["bob"], "UPDATE meta SET value = '1'")
    # a campaign registered in another's name is bob's all the same
    _sql(group["bob"], "INSERT INTO campaign (id, created_at, \"user\") VALUES ('forged', 0, :u)",
         u=group["roles"]["alice"])
    assert _sql(group["admin"], "SELECT \"user\" FROM campaign WHERE id = 'forged'") == [(group["roles"]["bob"],)]

    # bob's campaign cancel of alice's campaign changes nothing either
    ws.campaign("cancel", cid, "--store", group["bob"])
    assert _sql(group["admin"], "SELECT state, reason FROM point WHERE campaign_id = :c ORDER BY idx", c=cid) == before
    assert _sql(group["admin"], "SELECT wall_s FROM rank_timing ORDER BY attempt_id, rank") == times


def test_only_the_tables_owner_makes_a_group_store(group):
    assert _make_group(group["admin"], group["group"]).returncode == 0
    member = _make_group(group["alice"], group["group"])
    assert member.returncode == 2 and member.stderr.count("\n") == 1
    assert member.stderr.startswith("error: run this as the tables' owner")
    bad = _make_group(group["admin"], 'x"; DROP TABLE point; --')
    assert bad.returncode == 2 and "is not a plain PostgreSQL role name" in bad.stderr
    missing = _make_group(group["admin"], "no_such_role_here")
    assert missing.returncode == 2 and "no role 'no_such_role_here'" in missing.stderr
    sqlite = _make_group("sqlite:////tmp/x.db", group["group"])
    assert sqlite.returncode == 2 and "needs PostgreSQL" in sqlite.stderr
