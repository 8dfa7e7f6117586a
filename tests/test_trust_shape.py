"""Issue 41, finding 5: a store's shape is checked before it is read, and every query runs
under a budget that Ctrl-C ends.

A store crafted as whoever can write it would leave it (test_states.build's campaign, then
a table replaced by a view over an endless recursive CTE, a trigger, a computed column),
read by the real CLI in a subprocess: each read command refuses it in one line, exit 2,
within seconds (on the unchecked code they spun at 100 % CPU until SIGKILL), and the
store's bytes are as they were. A query that the shape check cannot foresee (here an
endless one of our own) ends at the budget, or at Ctrl-C within a second, in one line.
"""

from __future__ import annotations

import hashlib
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from test_states import build

ENDLESS = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c)"
HANG = 60  # seconds: a read command still running then hangs (each answers in a few)
READS = (("status",), ("status", "--json"), ("harvest",), ("harvest", "--to", "csv"), ("report", "--out", "r.html"),
         ("plan",))
CRAFTED = {  # what whoever writes the store does, and what the refusal names
    "view-endless": ("ALTER TABLE campaign RENAME TO campaign_real; "
                     f"CREATE VIEW campaign AS {ENDLESS} SELECT r.* FROM campaign_real r, c WHERE c.x < 0;",
                     "view 'campaign' (a campaign store has none)"),
    "view-meta": ("ALTER TABLE meta RENAME TO meta_real; "
                  f"CREATE VIEW meta AS {ENDLESS} SELECT m.* FROM meta_real m, c WHERE c.x < 0;",
                  "view 'meta' (a campaign store has none)"),
    "trigger": ("CREATE TRIGGER spin AFTER UPDATE ON point BEGIN UPDATE point SET reason = 'x' WHERE id = NEW.id; END;",
                "trigger 'spin' on 'point' (a campaign store has none)"),
    "computed": ("ALTER TABLE point ADD COLUMN big INTEGER GENERATED ALWAYS AS (length(printf('%.*c', gpus, 'x')));",
                 "table 'point' has computed columns ('big')"),
    "virtual": ("DROP TABLE evaluation; CREATE VIRTUAL TABLE evaluation USING fts5(split);",
                "table 'evaluation' is a virtual table"),
}


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _crafted(ws, script: str) -> str:
    build(ws.store_url, ws.results)
    con = sqlite3.connect(ws.db)
    con.executescript(script)
    con.commit()
    con.close()
    return _digest(ws.db)


@pytest.mark.parametrize("case", CRAFTED)
def test_a_store_shaped_to_run_sql_is_refused_in_one_line_by_every_read_command(ws, case):
    script, what = CRAFTED[case]
    before = _crafted(ws, script)
    for argv in READS:
        res = ws.campaign(*argv, "--store", ws.store_url, timeout=HANG)
        assert res.returncode == 2 and res.stdout == "", (argv, res)
        assert res.stderr == (f"error: results store {ws.db} is not shaped as a campaign store: {what}; campaign reads "
                              "no store whose tables run SQL of their own (docs/security.md); ask its owner to "
                              "restore it, or name another with --store URL\n"), (argv, res.stderr)
        assert _digest(ws.db) == before, argv  # a read never writes
    assert not (ws.path / "r.html").exists()


def test_a_writing_command_refuses_a_trigger_before_it_writes(ws):
    """A trigger runs on the writes of ``ingest`` (and of launch, resume, cancel): the
    writing open refuses the store before its upgrade or any write."""
    before = _crafted(ws, CRAFTED["trigger"][0])
    res = ws.campaign("ingest", "--all", "--store", ws.store_url, timeout=HANG)
    assert res.returncode == 2 and "trigger 'spin' on 'point'" in res.stderr and len(res.stderr.splitlines()) == 1
    assert _digest(ws.db) == before


def test_a_legitimate_store_of_any_version_has_its_shape(tmp_path):
    """What the schema and its migrations make passes: a new store, the v1 store of
    test_migrate, and one with a table of someone else's beside ours (never read)."""
    from sqlalchemy import create_engine

    from campaign.store.shape import check_shape
    from test_migrate import v1_store

    build(f"sqlite:///{tmp_path / 'new.db'}", tmp_path / "results")
    v1 = v1_store(tmp_path / "v1.db")
    con = sqlite3.connect(v1)
    con.execute("CREATE TABLE notes (text TEXT)")
    con.commit()
    con.close()
    for db in (tmp_path / "new.db", v1):
        engine = create_engine(f"sqlite:///{db}")
        check_shape(engine, str(db))
        engine.dispose()


# ---------------------------------------------------------------- the budget and Ctrl-C

# An endless query through the store's own engine, under the CLI's one error mapper: what
# any read command's query that ran on would do.
QUERY = f"""
import sys
from sqlalchemy import text
from campaign.cli.exits import exit_with, guarded
from campaign.store import open_store

def command():
    with open_store(sys.argv[1], readonly=True) as store, store.engine.connect() as conn:
        print("querying", file=sys.stderr, flush=True)
        conn.execute(text("{ENDLESS} SELECT count(*) FROM c")).scalar()

exit_with(guarded(command, store_url=sys.argv[1]))
"""


def _endless(ws, url: str, **env: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", QUERY, url], cwd=ws.path, env=dict(ws.env, **env),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _answer(proc: subprocess.Popen) -> tuple[str, str]:
    """What ``proc`` printed once it ended; killed (SIGKILL) when it hangs instead."""
    try:
        return proc.communicate(timeout=HANG)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise AssertionError(f"still running after {HANG} s: killed") from None


def _sigint_ends_it(ws, url: str) -> None:
    proc = _endless(ws, url)
    assert proc.stderr.readline() == "querying\n"
    time.sleep(1.0)  # well inside the query
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = _answer(proc)
    assert time.monotonic() - sent < 10, "Ctrl-C was not heard"  # within a second; generous on a loaded machine
    assert (proc.returncode, out, err) == (130, "", "interrupted (Ctrl-C)\n")


def _budget_ends_it(ws, url: str) -> None:
    proc = _endless(ws, url, CAMPAIGN_QUERY_TIMEOUT_S="1")
    out, err = _answer(proc)
    assert proc.returncode == 2 and out == "", err
    where = ws.db if url == ws.store_url else None
    assert err.startswith("querying\nerror: results store ") and err.count("\n") == 2, err
    assert err.endswith(": a query ran past its budget of 1 s (CAMPAIGN_QUERY_TIMEOUT_S); a store made to hang its "
                        "readers (docs/security.md) or a very large one: set CAMPAIGN_QUERY_TIMEOUT_S higher to wait "
                        "longer\n"), err
    if where is not None:
        assert f"results store {where}:" in err


def test_ctrl_c_ends_a_running_query_in_one_line(ws):
    build(ws.store_url, ws.results)
    before = _digest(ws.db)
    _sigint_ends_it(ws, ws.store_url)
    assert _digest(ws.db) == before


def test_a_query_ends_at_its_budget_in_one_line(ws):
    build(ws.store_url, ws.results)
    before = _digest(ws.db)
    _budget_ends_it(ws, ws.store_url)
    assert _digest(ws.db) == before


@pytest.mark.parametrize("value", ["abc", "0", "-1", "inf"])
def test_a_budget_that_is_no_number_of_seconds_is_refused(ws, value):
    build(ws.store_url, ws.results)
    res = _status(ws, CAMPAIGN_QUERY_TIMEOUT_S=value)
    assert res.returncode == 2 and res.stderr == (
        f"error: CAMPAIGN_QUERY_TIMEOUT_S={value!r}: give the seconds one query of the store may run, "
        "e.g. CAMPAIGN_QUERY_TIMEOUT_S=300\n"), res.stderr


def _status(ws, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "campaign", "status", "--store", ws.store_url], cwd=ws.path,
                          env=dict(ws.env, **env), capture_output=True, text=True, timeout=HANG)


# ---------------------------------------------------------------- PostgreSQL

@pytest.mark.postgres
@pytest.mark.parametrize("case", ["view", "trigger"])
def test_a_postgresql_store_shaped_to_run_sql_is_refused(ws, pg_url, case):  # noqa: F811
    """The same on PostgreSQL: a view where a table was (a view in a schema ahead of
    ``public`` on the search path would shadow it the same way) and a trigger that a group
    store's SQL did not create."""
    from sqlalchemy import create_engine

    build(pg_url, ws.results)
    engine = create_engine(pg_url)
    with engine.begin() as conn:
        if case == "view":
            conn.exec_driver_sql("ALTER TABLE campaign RENAME TO campaign_real")
            conn.exec_driver_sql(f"CREATE VIEW campaign AS {ENDLESS} SELECT r.* FROM campaign_real r, c WHERE c.x < 0")
        else:
            conn.exec_driver_sql("CREATE FUNCTION spin() RETURNS trigger LANGUAGE plpgsql AS "
                                 "$$ BEGIN LOOP END LOOP; END $$")
            conn.exec_driver_sql("CREATE TRIGGER spin BEFORE UPDATE ON point FOR EACH ROW EXECUTE FUNCTION spin()")
    engine.dispose()
    what = "'campaign' is a view (public.campaign)" if case == "view" else "trigger 'spin' on 'point' (runs spin()"
    for argv in READS:
        res = ws.campaign(*argv, "--store", pg_url, timeout=HANG)
        assert res.returncode == 2 and res.stdout == "" and len(res.stderr.splitlines()) == 1, (argv, res)
        assert "is not shaped as a campaign store: " + what in res.stderr, (argv, res.stderr)


@pytest.mark.postgres
def test_a_postgresql_query_ends_at_its_budget_and_at_ctrl_c(ws, pg_url):  # noqa: F811
    build(pg_url, ws.results)
    _budget_ends_it(ws, pg_url)
    _sigint_ends_it(ws, pg_url)


from test_postgres import pg_url  # noqa: E402,F401  (the fixture: a fresh database, skipped without a server)
