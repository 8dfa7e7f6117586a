"""Forward, additive migrations of the results store: one function per version step.

``STEPS[v]`` brings a store of schema version ``v - 1`` to ``v`` in place: it only adds
(tables, indexes, nullable columns), so what an older campaign wrote stays as it was
and a reader that knows the older shape still reads it. Each step is idempotent (a
launch that died half-way, or two launches at once, can run it again) and ends by
recording its version. ``campaign launch`` migrates the store it registers in
(``open_store(create=True)``); read commands open a store of any version from
``OLDEST`` on without changing it and read what that version has.
"""

from __future__ import annotations

from typing import Callable

from sqlalchemy import update
from sqlalchemy.engine import Connection, Engine

from campaign_sql.engine import stored_version
from campaign_sql.schema import SCHEMA_VERSION, meta, progress

OLDEST = 1  # the oldest schema version a migration path starts from


def _to_2(conn: Connection) -> None:
    """Version 2: the ``progress`` table (heartbeats of running ranks)."""
    progress.create(conn, checkfirst=True)
    for index in progress.indexes:
        index.create(conn, checkfirst=True)


STEPS: dict[int, Callable[[Connection], None]] = {2: _to_2}


def migratable(found: str | None) -> bool:
    """Whether a store of schema version ``found`` can be brought to this one (or is it)."""
    return found is not None and found.isdigit() and OLDEST <= int(found) <= SCHEMA_VERSION


def migrate(engine: Engine) -> list[int]:
    """Apply every step from the store's version to ``SCHEMA_VERSION``, each in its own
    transaction; returns the versions reached (empty: the store was current). The caller
    has checked ``migratable``."""
    found = int(stored_version(engine) or SCHEMA_VERSION)
    done = []
    for version in range(found + 1, SCHEMA_VERSION + 1):
        with engine.begin() as conn:
            STEPS[version](conn)
            conn.execute(update(meta).where(meta.c.key == "schema_version").values(value=str(version)))
        done.append(version)
    return done
