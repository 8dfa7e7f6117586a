"""Every `campaign` subcommand that takes a store, walked through what goes wrong: a
broken store (0-byte, foreign SQLite, garbage, unreachable PostgreSQL), a read-only
results folder, Ctrl-C, a PostgreSQL URL without its driver. Each answer is one
line, no traceback, the documented exit status (README, "Exit status"), and the
store byte for byte as it was."""

from __future__ import annotations

import hashlib
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from campaign.cli import build_parser
from test_postgres import fresh_database
from test_states import CID, build

EXIT_USAGE, EXIT_INTERRUPTED = 2, 130


def store_commands() -> list[str]:
    """The subcommands that read or write a store (those with --store), whoever added them;
    ``submit`` as ``launch``: it reads its plan first and opens a store only as a launch does
    (tests/test_launch_plan.py)."""
    sub = next(a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction")
    return sorted(name for name, p in sub.choices.items() if any("--store" in a.option_strings for a in p._actions)
                  and name not in ("submit", "launch"))


COMMANDS = store_commands()


def test_the_walk_covers_the_read_commands():
    assert {"status", "harvest", "plan", "report", "cancel", "ingest"} <= set(COMMANDS)


def _digest(path: Path):
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None


def _one_line_error(res, exit_code: int, starts: str = "error: ", alone: bool = True):
    """Exit status, no traceback, and the error on one line (``alone``: nothing else on
    stderr; else after the command's notes, e.g. status --wait's progress log)."""
    text = res.stdout + res.stderr
    assert res.returncode == exit_code, text
    assert "Traceback" not in text, text
    lines = res.stderr.splitlines()
    assert res.stderr.endswith("\n") and lines and lines[-1].startswith(starts), res.stderr
    assert sum(line.startswith(starts) for line in lines) == 1 and (not alone or len(lines) == 1), res.stderr


def _broken(kind: str, path: Path) -> str:
    if kind == "zero":
        path.write_bytes(b"")
    elif kind == "foreign":
        con = sqlite3.connect(path)
        con.execute("create table notes (t text)")
        con.execute("insert into notes values ('not a campaign store')")
        con.commit()
        con.close()
    elif kind == "garbage":
        path.write_bytes(bytes(range(256)) * 16)
    return f"sqlite:///{path}"


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("kind,message", [
    ("zero", "is not a campaign results store"),
    ("foreign", "is not a campaign results store"),
    ("garbage", "not an SQLite database"),
])
def test_a_broken_sqlite_store_is_refused_unchanged(ws, command, kind, message):
    ws.results.mkdir(parents=True)
    url = _broken(kind, ws.db)
    before = _digest(ws.db)
    res = ws.campaign(command, "--store", url)
    _one_line_error(res, EXIT_USAGE)
    assert message in res.stderr
    assert _digest(ws.db) == before and sorted(p.name for p in ws.results.iterdir()) == ["campaign.db"]


@pytest.mark.parametrize("command", COMMANDS)
def test_an_unreachable_postgresql_store_is_one_line_without_its_password(ws, command):
    res = ws.campaign(command, "--store", "postgresql+psycopg2://nobody:s3cret@127.0.0.1:1/none")
    _one_line_error(res, EXIT_USAGE, "error: cannot open results store postgresql+psycopg2://nobody:***@127.0.0.1:1/none")
    assert "s3cret" not in res.stderr


# ---------------------------------------------------------------- read-only results folder

def _as_unprivileged() -> list[str]:
    """A prefix that makes this user subject to file modes: root keeps its uid but loses
    the capabilities that bypass them (setpriv)."""
    import os

    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("root without setpriv: a read-only folder would not stop root")
    return ["setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner"]


# resume has points to resubmit in this store: like ingest it must write
READ_ONLY_EXIT = {"status": 0, "harvest": 0, "cancel": 0, "ingest": EXIT_USAGE, "resume": EXIT_USAGE}


@pytest.mark.parametrize("command", COMMANDS)
def test_a_read_only_results_folder(ws, command):
    """status and harvest read it; cancel has nothing to stop (no write needed); ingest
    and resume must write: one line, exit 2. Nothing changes."""
    build(ws.store_url, ws.results)
    files = sorted(p for p in ws.results.rglob("*") if p.is_file())
    before = {p: _digest(p) for p in files}
    paths = [ws.results, *ws.results.rglob("*")]
    modes = {p: p.stat().st_mode for p in paths}
    try:
        for p in paths:
            p.chmod(modes[p] & ~0o222)
        res = ws.run(*_as_unprivileged(), sys.executable, "-m", "campaign", command)
    finally:
        for p in reversed(paths):
            p.chmod(modes[p])
    expected = READ_ONLY_EXIT.get(command, 0)
    if expected == EXIT_USAGE:
        _one_line_error(res, EXIT_USAGE)
        assert "read-only" in res.stderr or "Permission denied" in res.stderr, res.stderr
    else:
        assert res.returncode == expected and "Traceback" not in res.stderr, res.stdout + res.stderr
    assert sorted(p for p in ws.results.rglob("*") if p.is_file()) == files
    assert {p: _digest(p) for p in files} == before


def test_harvest_into_a_read_only_folder_is_one_line(ws, tmp_path):
    build(ws.store_url, ws.results)
    out = tmp_path / "ro"
    out.mkdir()
    out.chmod(0o555)
    try:
        res = ws.run(*_as_unprivileged(), sys.executable, "-m", "campaign", "harvest", "--to", "csv",
                     "--out", str(out / "t.csv"))
    finally:
        out.chmod(0o755)
    _one_line_error(res, EXIT_USAGE, alone=False)  # after harvest's notes on the points it leaves out
    assert "Permission denied" in res.stderr


# ---------------------------------------------------------------- Ctrl-C

def _interrupt(ws, argv: list[str], after_s: float, ready=None):
    """Run ``argv``, send it SIGINT after ``after_s`` seconds and once ``ready()`` holds
    (``"output"``: once it has written anything, i.e. it is past its imports and in its
    loop: a Ctrl-C during start-up is Python's, not the command's), up to 60 s."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        out_p, err_p = Path(tmp, "out"), Path(tmp, "err")
        with open(out_p, "w") as out_f, open(err_p, "w") as err_f:
            proc = subprocess.Popen(argv, cwd=ws.path, env=ws.env, stdout=out_f, stderr=err_f, text=True)
            if ready == "output":
                def ready() -> bool:
                    return out_p.stat().st_size > 0 or err_p.stat().st_size > 0
            deadline = time.monotonic() + 60
            time.sleep(after_s)
            while ready is not None and not ready() and time.monotonic() < deadline:
                time.sleep(0.2)
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=60)
        out, err = out_p.read_text(), err_p.read_text()
    return type("R", (), {"returncode": proc.returncode, "stdout": out, "stderr": err})


@pytest.fixture
def waiting(ws, tmp_path):
    """A campaign whose point 3 is pending on a live local job controller (a process
    that looks like one: submitit's module name and the campaign's folder)."""
    info = build(ws.store_url, ws.results)
    fake = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "submitit.local._local",
                             str(info["folder"])])
    con = sqlite3.connect(ws.db)
    con.execute("update point set job_id = ?, state = 'pending' where idx = 3", (str(fake.pid),))
    con.commit()
    con.close()
    yield info
    fake.kill()
    fake.wait()


@pytest.mark.parametrize("argv", [["status", "--wait", "--interval", "0.2"], ["status", "--watch", "--interval", "0.2"]])
def test_ctrl_c_while_waiting(ws, waiting, argv):
    before = _digest(ws.db)
    res = _interrupt(ws, [sys.executable, "-m", "campaign", *argv], 1.0, ready="output")
    _one_line_error(res, EXIT_INTERRUPTED, "interrupted (Ctrl-C)", alone=False)  # after --wait's progress log
    cid = CID
    assert res.stderr.splitlines()[-1] == (f"interrupted (Ctrl-C): campaign {cid}'s jobs go on running (campaign "
                                           f"status {cid} follows them again; campaign cancel {cid} stops them)")
    assert _digest(ws.db) == before


@pytest.fixture(scope="module")
def pg_built(tmp_path_factory):
    """One database on the test server holding test_states.build's campaign, read by every
    test below that only reads it or is interrupted before it reads (each made its own)."""
    with fresh_database() as url:
        build(url, tmp_path_factory.mktemp("pg-built") / "results")
        yield url


@pytest.mark.postgres
@pytest.mark.parametrize("driver", ["psycopg2", "psycopg"])
@pytest.mark.parametrize("command", COMMANDS)
def test_ctrl_c_while_the_database_holds_the_command(ws, pg_built, command, driver):
    """A command waiting on a PostgreSQL lock is interrupted at once (the query is
    cancelled), whichever driver."""
    if driver == "psycopg":
        pytest.importorskip("psycopg")
    sqlalchemy = pytest.importorskip("sqlalchemy")
    pg_url = pg_built
    url = pg_url.replace("postgresql+psycopg2://", f"postgresql+{driver}://")
    holder = sqlalchemy.create_engine(pg_url)
    # the Ctrl-C comes once the command waits on the lock (the server says so), not at a guess of
    # when: under load a command may still be starting at 4 s (a Ctrl-C there is start-up's)
    watcher = sqlalchemy.create_engine(pg_url, isolation_level="AUTOCOMMIT")  # a fresh look each time

    def waits_on_the_lock() -> bool:
        with watcher.connect() as look:
            return look.exec_driver_sql("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                                        "AND wait_event_type = 'Lock'").scalar() > 0

    with holder.connect() as conn:
        tx = conn.begin()
        conn.exec_driver_sql("LOCK TABLE meta IN ACCESS EXCLUSIVE MODE")
        res = _interrupt(ws, [sys.executable, "-m", "campaign", command, "--store", url], 0.5,
                         ready=waits_on_the_lock)
        tx.rollback()
    holder.dispose()
    watcher.dispose()
    _one_line_error(res, EXIT_INTERRUPTED, "interrupted (Ctrl-C)")


# ---------------------------------------------------------------- PostgreSQL drivers

def _without(*modules: str) -> list[str]:
    """Run the CLI in a Python where ``modules`` cannot be imported (as if not installed)."""
    blocked = "; ".join(f"sys.modules[{m!r}] = None" for m in modules)
    return [sys.executable, "-c", f"import sys; {blocked}; from campaign.cli import main; sys.exit(main())"]


def test_postgresql_without_a_driver_names_the_extra(ws):
    root = Path(__file__).resolve().parents[1]
    res = ws.run(*_without("psycopg2", "psycopg"), "status", "--store", "postgresql://u:pw@127.0.0.1:1/db")
    _one_line_error(res, EXIT_USAGE)
    assert "no PostgreSQL driver is installed; install campaign's postgres extra" in res.stderr
    assert f"pip install -e '{root}[postgres]'" in res.stderr and "psycopg 3" in res.stderr and ":pw@" not in res.stderr
    res = ws.run(*_without("psycopg"), "status", "--store", "postgresql+psycopg://u@127.0.0.1:1/db")
    _one_line_error(res, EXIT_USAGE)
    assert "needs psycopg 3; install campaign's postgres extra" in res.stderr
    res = ws.run(*_without("psycopg2"), "status", "--store", "postgresql+psycopg2://u@127.0.0.1:1/db")
    _one_line_error(res, EXIT_USAGE)
    assert "needs the psycopg2 driver (pip install psycopg2-binary)" in res.stderr


@pytest.mark.postgres
@pytest.mark.parametrize("hidden", [(), ("psycopg2",)], ids=["both-installed", "psycopg-only"])
def test_a_plain_postgresql_url_takes_the_installed_driver(ws, pg_built, hidden):
    if hidden:
        pytest.importorskip("psycopg")
    pg_url = pg_built
    plain = "postgresql://" + pg_url.split("://", 1)[1]
    res = ws.run(*_without(*hidden), "status", "--store", plain, "--json") if hidden else \
        ws.campaign("status", "--store", plain, "--json")
    assert res.returncode == 0 and f'"id": "{CID}"' in res.stdout, res.stderr


@pytest.mark.postgres
def test_read_commands_open_postgresql_read_only(pg_built):
    from sqlalchemy import text
    from sqlalchemy.exc import DBAPIError

    from campaign.store import open_store

    pg_url = pg_built
    with open_store(pg_url, readonly=True) as s:
        with pytest.raises(DBAPIError, match="read-only transaction"):
            with s.engine.begin() as conn:
                conn.execute(text("delete from point"))
    with open_store(pg_url) as s, s.engine.connect() as conn:
        assert conn.execute(text("select count(*) from point")).scalar() == 6


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the swallowed one, on purpose
def test_a_ctrl_c_a_finalizer_swallowed_still_ends_a_loop(default_sigint):
    # Python prints a KeyboardInterrupt raised inside a __del__ as "Exception ignored" and
    # goes on; the noted SIGINT ends the loop at its next sleep anyway (campaign.common.interrupt)
    import os

    from campaign.common import interrupt

    class Swallows:
        def __del__(self):
            os.kill(os.getpid(), signal.SIGINT)  # the handler's KeyboardInterrupt is raised in here: lost
            time.sleep(0.05)

    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        with interrupt.catching():
            Swallows()  # collected at once
            interrupt.sleep(5)  # raises, not 5 s later
    assert signal.getsignal(signal.SIGINT) is before  # the process as it was
    interrupt.sleep(0)  # and no Ctrl-C noted any more


def test_a_ctrl_c_a_finalizer_loses_prints_no_traceback(monkeypatch, default_sigint):
    """SIGINT landing in a finalizer (SQLAlchemy's weakref callbacks: seen in a whole run) is
    lost as "Exception ignored ... Traceback" on stderr: inside ``catching()`` it is not
    reported (the command's one line follows from ``heard()``); any other exception a
    finalizer raises goes to the hook before, which is the hook again afterwards."""
    import gc
    import weakref

    from campaign.common import interrupt

    reported = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: reported.append(u.exc_type))

    class Thing:
        pass

    def lose(exc):
        thing = Thing()
        refs.append(weakref.ref(thing, lambda ref: (_ for _ in ()).throw(exc)))  # the ref lives on: its callback runs
        del thing
        gc.collect()

    refs: list = []
    before = sys.unraisablehook
    with interrupt.catching():
        lose(KeyboardInterrupt())
        assert reported == []
        lose(ValueError("kept"))
        assert reported == [ValueError]
    assert sys.unraisablehook is before
    lose(KeyboardInterrupt())  # outside: reported, as Python does
    assert reported == [ValueError, KeyboardInterrupt]


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the swallowed one, on purpose
def test_a_ctrl_c_lost_before_a_query_lets_none_start(tmp_path, default_sigint):
    """A Ctrl-C whose KeyboardInterrupt was lost before the store's next query (in a
    finalizer, or while psycopg 3 connected: neither its wait nor SQLite's handler then
    sees it) ends the command at that query, not after a lock's wait."""
    import os

    from sqlalchemy import text

    from campaign.common import interrupt
    from campaign.store import open_store

    class Swallows:
        def __del__(self):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)

    with open_store(f"sqlite:///{tmp_path}/c.db", create=True) as store:
        with pytest.raises(KeyboardInterrupt):
            with interrupt.catching():
                Swallows()  # the Ctrl-C is noted, its exception lost
                with store.engine.connect() as conn:
                    conn.execute(text("select 1"))
        with store.engine.connect() as conn:  # heard no more once the command's catching() ended
            assert conn.execute(text("select 1")).scalar() == 1
