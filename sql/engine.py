"""The one engine factory and schema-version check, shared by host and jobs.

SQLite gets its pragmas on every connection (foreign keys, busy timeout, WAL);
any other SQLAlchemy URL (e.g. postgresql://) is used as it is.
"""

from __future__ import annotations

import os
from typing import Iterable, Mapping, Sequence

from sqlalchemy import create_engine, event, insert, inspect, select
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import ArgumentError, IntegrityError

from campaign_sql.schema import SCHEMA_VERSION, meta, metadata


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


def make_engine(url: str, *, busy_timeout_s: float = 30.0) -> Engine:
    """An engine for ``url``; raises ``ValueError`` for a URL SQLAlchemy cannot parse."""
    try:
        u = make_url(url)
    except ArgumentError as exc:
        raise ValueError(f"not a database URL: {url!r}") from exc
    if u.get_backend_name() != "sqlite":
        return create_engine(u, pool_pre_ping=True, future=True)
    # sqlite3's own timeout is the first line of defence against SQLITE_BUSY;
    # the pragma below repeats it for connections sqlite3 did not open itself.
    engine = create_engine(u, connect_args={"timeout": busy_timeout_s}, future=True)

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


def stored_version(engine: Engine) -> str | None:
    """The schema version recorded in the store, or None if it has no campaign tables."""
    insp = inspect(engine)
    if not insp.has_table("meta"):
        return None
    with engine.connect() as conn:
        return conn.execute(select(meta.c.value).where(meta.c.key == "schema_version")).scalar()


def check_version(engine: Engine) -> None:
    """Raise ``SchemaMismatch`` unless the store holds this schema version."""
    found = stored_version(engine)
    if found != str(SCHEMA_VERSION):
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
