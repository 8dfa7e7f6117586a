"""The one engine factory and schema-version check, shared by host and jobs.

SQLite gets its pragmas on every connection (foreign keys, busy timeout, WAL);
a plain ``postgresql://`` URL gets whichever PostgreSQL driver is installed
(``postgres_driver``); any other SQLAlchemy URL is used as it is. A read-only
engine (``campaign status``/``harvest``) can change nothing: SQLite is opened
``mode=ro`` with ``query_only`` and no journal-mode switch (which would write the
file), PostgreSQL sessions are ``READ ONLY``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sqlite3
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence
from urllib.parse import quote

from sqlalchemy import create_engine, event, insert, inspect, select
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.exc import ArgumentError, IntegrityError

# PostgreSQL drivers SQLAlchemy knows, in the order a plain postgresql:// URL tries them:
# SQLAlchemy's own default first, so that a URL means what SQLAlchemy says it means
# wherever both are installed.
POSTGRES_DRIVERS = (("psycopg2", "psycopg2"), ("psycopg", "psycopg"))

from campaign_sql.schema import SCHEMA_VERSION, meta, metadata


class Dumped(dict):
    """A JSON column's value (a dict) that carries its JSON text already made, exactly
    ``json.dumps(value)`` (a launch makes its points' texts from their shared sections:
    campaign.common.jsontext); ``dump_json`` stores that text as it is."""

    __slots__ = ("text",)

    def __init__(self, value: Mapping[str, Any], text: str):
        super().__init__(value)
        self.text = text


def dump_json(value: Any) -> str:
    """How SQLite's and PostgreSQL's JSON columns are written (make_engine): a ``Dumped`` value's own text, else
    ``json.dumps`` as SQLAlchemy does by default: the stored text is the same either way."""
    return value.text if type(value) is Dumped else json.dumps(value)


class SchemaMismatch(Exception):
    """The store exists but was written with another schema version (or none)."""

    def __init__(self, found: str | None):
        self.found = found
        super().__init__(found)


def sqlite_path(url: str) -> str | None:
    """The file behind a sqlite URL, or None for other databases and :memory:."""
    u = make_url(url)
    if u.get_backend_name() != "sqlite" or not u.database or u.database == ":memory:":
        return None
    return u.database


def postgres_driver(u: URL) -> URL:
    """``postgresql://`` (no driver named) -> the URL with the installed driver:
    SQLAlchemy 2.x would take psycopg2 whether or not it is there, and the
    ``postgres`` extra installs psycopg 3. Other URLs are returned as they are; so is
    a plain one when no driver is installed (opening it then names the package)."""
    if u.drivername != "postgresql":
        return u
    for module, driver in POSTGRES_DRIVERS:
        if _installed(module):
            return u.set(drivername=f"postgresql+{driver}")
    return u


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # blocked (sys.modules[name] = None) or broken
        return False


def _parse(url: str) -> URL:
    try:
        return postgres_driver(make_url(url))
    except ArgumentError as exc:
        raise ValueError(f"not a database URL: {url!r}") from exc


def make_engine(url: str, *, busy_timeout_s: float = 30.0, readonly: bool = False,
                interruptible: bool = False, json_deserializer: Optional[Callable[[str], Any]] = None) -> Engine:
    """An engine for ``url``; raises ``ValueError`` for a URL SQLAlchemy cannot parse.

    ``readonly``: an engine that cannot write (see the module's docstring); an SQLite
    file must exist. ``interruptible`` (the host's commands): Ctrl-C also ends a
    psycopg2 query that waits on the server. ``json_deserializer``: how JSON columns
    are parsed, on every backend (SQLite's text, psycopg's own parsing); the host passes
    ``campaign.common.bounded.stored`` (a store others write is parsed within bounds; this
    shared package imports nothing of the host), None: SQLAlchemy's ``json.loads``.
    SQLite's and PostgreSQL's JSON columns are written by ``dump_json`` (``json.dumps``)."""
    u = _parse(url)
    json_args: dict[str, Any] = {}
    if u.get_backend_name() in ("sqlite", "postgresql"):  # others may take no serializer: a Dumped is a dict
        json_args["json_serializer"] = dump_json
    if json_deserializer is not None:
        json_args["json_deserializer"] = json_deserializer
    if u.get_backend_name() != "sqlite":
        engine = create_engine(u, pool_pre_ping=True, future=True, **json_args)
        if readonly and u.get_backend_name() == "postgresql":
            _read_only_sessions(engine)
        if interruptible and u.get_driver_name() == "psycopg2":
            _interruptible_psycopg2()
        return engine
    path = sqlite_path(url)
    if readonly and path is not None:
        return _read_only_sqlite(path, busy_timeout_s, json_args)
    # sqlite3's own timeout is the first line of defence against SQLITE_BUSY;
    # the pragma below repeats it for connections sqlite3 did not open itself.
    engine = create_engine(u, connect_args={"timeout": busy_timeout_s}, future=True, **json_args)

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_conn, _record):  # pragma: no cover - exercised by every test
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute(f"PRAGMA busy_timeout={int(busy_timeout_s * 1000)}")
        # WAL lets readers (campaign status) run while jobs write. It needs a local
        # file system; set CAMPAIGN_SQLITE_JOURNAL=DELETE for stores on NFS/Lustre.
        mode = os.environ.get("CAMPAIGN_SQLITE_JOURNAL", "WAL").upper()
        cur.execute(f"PRAGMA journal_mode={mode if mode in ('WAL', 'DELETE', 'TRUNCATE') else 'WAL'}")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.close()

    return engine


def _read_only_sqlite(path: str, busy_timeout_s: float, json_args: Mapping[str, Any]) -> Engine:
    """An engine on the SQLite file ``path`` that cannot write it: ``mode=ro`` (the
    file is never created nor its journal mode switched: a WAL switch rewrites the
    header of a 0-byte or foreign file) and ``query_only`` besides.

    A WAL store in a folder this user cannot write (a published or another user's
    results folder) cannot be read ``mode=ro`` when its ``-shm`` file is gone (SQLite
    must create it); it is then read ``immutable``, which assumes no one writes it
    meanwhile: nobody who could not create that file can."""
    uri = "file:" + quote(os.path.abspath(path)) + "?mode=ro"

    def connect() -> sqlite3.Connection:
        con = sqlite3.connect(uri, uri=True, timeout=busy_timeout_s, check_same_thread=False)
        try:
            con.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except sqlite3.OperationalError as exc:
            if "readonly database" not in str(exc) and "unable to open" not in str(exc):
                raise
            con.close()
            con = sqlite3.connect(uri + "&immutable=1", uri=True, timeout=busy_timeout_s, check_same_thread=False)
        except sqlite3.DatabaseError:
            pass  # not a database: the schema check says so, in its words
        return con

    engine = create_engine("sqlite://", creator=connect, future=True, **json_args)

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_conn, _record):  # pragma: no cover - exercised by every read test
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA query_only=ON")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute(f"PRAGMA busy_timeout={int(busy_timeout_s * 1000)}")
        cur.close()

    return engine


def _read_only_sessions(engine: Engine) -> None:
    """Every PostgreSQL session of ``engine`` is READ ONLY (the server refuses a write)."""

    @event.listens_for(engine, "connect")
    def _read_only(dbapi_conn, _record):
        cur = dbapi_conn.cursor()
        cur.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
        cur.close()
        dbapi_conn.commit()


def _no_interrupt() -> bool:
    return False


# Asked by the wait callback below every half second while it waits on the server: whether a
# Ctrl-C came whose KeyboardInterrupt something swallowed (a finalizer run in between: Python
# prints "Exception ignored" and goes on). campaign's CLI sets it to its note of every SIGINT
# (campaign.common.interrupt.heard, through campaign.store.budget); a job leaves it be.
interrupt_heard = _no_interrupt


def _interruptible_psycopg2() -> None:
    """Ctrl-C cancels a psycopg2 query that waits (e.g. for a lock) and raises
    ``KeyboardInterrupt``, instead of holding the command until the server answers:
    psycopg2's documented wait callback (psycopg 3 does this itself)."""
    import psycopg2.extensions

    if psycopg2.extensions.get_wait_callback() is None:
        psycopg2.extensions.set_wait_callback(_wait_interruptible)


def _wait_interruptible(conn) -> None:
    """psycopg2.extras.wait_select, except that the query Ctrl-C cancelled ends as the
    ``KeyboardInterrupt`` it was (wait_select leaves the server's QueryCanceled error)."""
    import select

    import psycopg2.extensions as ext

    interrupted = False
    while True:
        try:
            state = conn.poll()
            if state == ext.POLL_OK:
                if interrupted:  # the server has answered the cancel
                    raise KeyboardInterrupt
                return
            if state == ext.POLL_READ:
                select.select([conn.fileno()], [], [], 0.5)
            elif state == ext.POLL_WRITE:
                select.select([], [conn.fileno()], [], 0.5)
            else:
                raise conn.OperationalError(f"bad state from poll: {state}")
            if not interrupted and interrupt_heard():  # a Ctrl-C whose exception was lost
                raise KeyboardInterrupt
        except KeyboardInterrupt:
            if interrupted:
                raise
            conn.cancel()
            interrupted = True


def stored_version(engine: Engine) -> str | None:
    """The schema version recorded in the store, or None if it has no campaign tables."""
    insp = inspect(engine)
    if not insp.has_table("meta"):
        return None
    with engine.connect() as conn:
        return conn.execute(select(meta.c.value).where(meta.c.key == "schema_version")).scalar()


def check_version(engine: Engine, accept: Iterable[int] = (SCHEMA_VERSION,)) -> None:
    """Raise ``SchemaMismatch`` unless the store holds one of the ``accept`` versions
    (by default this schema version alone)."""
    found = stored_version(engine)
    if found not in {str(v) for v in accept}:
        raise SchemaMismatch(found)


def create_schema(engine: Engine) -> None:
    """Create every table in an empty store and record the schema version."""
    metadata.create_all(engine, checkfirst=True)
    with engine.begin() as conn:
        insert_ignore(conn, meta, [{"key": "schema_version", "value": str(SCHEMA_VERSION)}])


def ensure_indexes(engine: Engine) -> None:
    """Create any index of the schema that an existing store lacks (indexes only: a
    missing table or column is a schema change and gets a new version)."""
    for table in metadata.sorted_tables:
        for index in table.indexes:
            index.create(engine, checkfirst=True)


def insert_ignore(conn, table, rows: Sequence[Mapping] | Iterable[Mapping]) -> None:
    """Insert rows, skipping those whose primary/unique key already exists (idempotent)."""
    rows = list(rows)
    if not rows:
        return
    name = conn.dialect.name
    if name in ("sqlite", "postgresql"):
        if name == "sqlite":
            from sqlalchemy.dialects.sqlite import insert as dialect_insert
        else:
            from sqlalchemy.dialects.postgresql import insert as dialect_insert
        stmt = dialect_insert(table).on_conflict_do_nothing()
        if name == "postgresql":
            # SQLAlchemy batches an executemany INSERT ... ON CONFLICT into multi-row VALUES
            # pages ("insertmanyvalues") only when it has a RETURNING clause (2.1: #13130);
            # without one psycopg2 sends one statement per row (~2x slower here).
            stmt = stmt.returning(*table.primary_key.columns)
            conn.execute(stmt, rows).all()
            return
        conn.execute(stmt, rows)
        return
    for row in rows:  # other databases: one by one, duplicates skipped
        try:
            with conn.begin_nested():
                conn.execute(insert(table), [row])
        except IntegrityError:
            pass
