"""Forward migrations of the results store: one function per version step, additive only.

A store written by an older campaign is upgraded in place by the first command that
writes to it (``campaign launch``, ``resume``, ``cancel``, ``ingest``: ``open_store``
without ``readonly``); the read commands (``status``, ``harvest``) never migrate and
read every version in ``READABLE`` (what a version lacks reads as absent: a column of
version 2, version 3's heartbeats, so status shows no progress for its points, version
4's point signatures, so a resume refuses its points as unsigned, version 5's evaluation
rows, so harvest shows no test figures, or version 6's job signatures, so cancel signals
none of its jobs).

Steps only add (tables, columns, indexes), so that a job of the previous version still
writes to an upgraded store, and each runs in its own transaction that also records
the new version: a step that fails leaves the store at the version before it. Two
commands that upgrade the same store at once: the one that loses the race finds the
version already moved on and goes on.
"""

from __future__ import annotations

from typing import Callable

from sqlalchemy import Column, Table, select, update
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.schema import CreateColumn

from campaign_sql.schema import SCHEMA_VERSION, attempt, evaluation, meta, point, progress

READABLE = (1, 2, 3, 4, 5, 6)  # versions the read commands read as they are


def _add_columns(conn: Connection, table: Table, columns: list[Column]) -> None:
    """``ALTER TABLE ... ADD COLUMN`` for each of ``columns`` (as ``schema.py`` declares
    them), rendered by the store's own dialect; a column already there is skipped."""
    from sqlalchemy import inspect

    have = {c["name"] for c in inspect(conn).get_columns(table.name)}
    preparer = conn.dialect.identifier_preparer
    for column in columns:
        if column.name in have:
            continue
        ddl = str(CreateColumn(column).compile(dialect=conn.dialect))
        conn.exec_driver_sql(f"ALTER TABLE {preparer.format_table(table)} ADD COLUMN {ddl}")


def _v1_to_v2(conn: Connection) -> None:
    """Attempts of resubmissions (campaign resume, max_retries): where each came from,
    the overrides it ran with, when it was submitted and on which nodes it ran."""
    _add_columns(conn, attempt, [attempt.c.origin, attempt.c.overrides, attempt.c.submitted_at, attempt.c.node_list])


def _v2_to_v3(conn: Connection) -> None:
    """Heartbeats of running ranks: the ``progress`` table (and its indexes)."""
    progress.create(conn, checkfirst=True)
    for index in progress.indexes:
        index.create(conn, checkfirst=True)


def _v3_to_v4(conn: Connection) -> None:
    """Signed points: ``point.signature``, the launcher's HMAC of what a resubmission
    trusts (campaign/common/signing.py). Points stored before it have none, and are refused by
    ``campaign resume`` (launch them anew)."""
    _add_columns(conn, point, [point.c.signature])


def _v4_to_v5(conn: Connection) -> None:
    """Evaluation passes (experiment.validation=true): the ``evaluation`` table. A job of
    version 4 writes none; harvest's convergence table shows no test figures for it."""
    evaluation.create(conn, checkfirst=True)


def _v5_to_v6(conn: Connection) -> None:
    """Signed job ids: ``point.job_signature``, the submitter's HMAC of the job it recorded
    (campaign/common/signing.py). A job submitted before it has none: ``campaign cancel``
    never signals it (it says so, with the job id to stop by hand); ``campaign resume``
    signs the jobs it submits."""
    _add_columns(conn, point, [point.c.job_signature])


# from version -> the step to the next
STEPS: dict[int, Callable[[Connection], None]] = {1: _v1_to_v2, 2: _v2_to_v3, 3: _v3_to_v4, 4: _v4_to_v5,
                                                  5: _v5_to_v6}


def _version(conn: Connection) -> int:
    return int(conn.execute(select(meta.c.value).where(meta.c.key == "schema_version")).scalar_one())


def can_migrate(found: int) -> bool:
    """Whether a store of version ``found`` can be brought to ``SCHEMA_VERSION``."""
    return all(v in STEPS for v in range(found, SCHEMA_VERSION))


def migrate(engine: Engine) -> list[int]:
    """Bring the store to ``SCHEMA_VERSION``, one step per transaction; returns the
    versions it upgraded from (empty when it was current)."""
    done = []
    while True:
        with engine.connect() as conn:
            found = _version(conn)
        if found >= SCHEMA_VERSION:
            return done
        step = STEPS[found]
        try:
            with engine.begin() as conn:
                if _version(conn) != found:  # another command upgraded it meanwhile
                    continue
                step(conn)
                conn.execute(update(meta).where(meta.c.key == "schema_version").values(value=str(found + 1)))
        except SQLAlchemyError:
            with engine.connect() as conn:
                if _version(conn) > found:  # lost the race to another command's upgrade
                    continue
            raise
        done.append(found)
