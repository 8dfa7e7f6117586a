"""Every query of a store runs under a time budget, and Ctrl-C ends it (issue #41, finding 5).

SQLite runs a query in C: a Ctrl-C only sets a flag that Python looks at when the query
returns, which an endless one never does (a view over an endless recursive CTE held every
read command at 100 % CPU until SIGKILL). A progress handler gives Python a turn every
``PROGRESS_STEPS`` steps of SQLite's machine (about every 30 us): there the handler ends a
query that Ctrl-C came during (``campaign.common.interrupt``), or that has run past the
budget. PostgreSQL's own ``statement_timeout`` is the budget there; Ctrl-C cancels the
server's query (psycopg 3 does it itself, psycopg2 through ``campaign_sql.engine``'s wait
callback).

A Ctrl-C noted before a query starts (one a finalizer lost, or one that came while the
driver connected, where psycopg 3 sees none) lets no query start. A query so ended is
raised as ``KeyboardInterrupt`` (the command's one-line "interrupted", exit 130:
campaign.cli.exits) or as a ``StoreError`` naming the budget (exit 2), never as a
database error. The budget is per statement, ``CAMPAIGN_QUERY_TIMEOUT_S`` seconds (default
``DEFAULT_S``): the biggest harvest measured (benchmarks/harvest_scale.py, 1,000 points and
1M iteration rows) takes under a second in its longest query, so the default leaves a store
a hundred times larger, or a slow shared file system, room to be read.
"""

from __future__ import annotations

import os
import sqlite3
import time
from typing import Any, Optional

from sqlalchemy import event
from sqlalchemy.engine import Engine

from campaign.common.errors import ConfigError, StoreError
from campaign.common.interrupt import heard

ENV = "CAMPAIGN_QUERY_TIMEOUT_S"
DEFAULT_S = 300.0
PROGRESS_STEPS = 1000  # SQLite machine steps between two turns of the handler (~30 us)
_KEY = "campaign_query_clock"  # the connection's _Clock, in its pool record's info


def budget_s() -> float:
    """Seconds one query may run: ``$CAMPAIGN_QUERY_TIMEOUT_S``, else ``DEFAULT_S``."""
    raw = os.environ.get(ENV, "").strip()
    if not raw:
        return DEFAULT_S
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not 0 < value < 1e9:  # nan and inf included
        raise ConfigError(f"{ENV}={raw!r}: give the seconds one query of the store may run, e.g. {ENV}={DEFAULT_S:g}")
    return value


class _Clock:
    """One connection's running query: when its budget ends, and why the handler ended it;
    the budget and the store's name, for its message."""

    __slots__ = ("deadline", "why", "seconds", "where")

    def __init__(self, seconds: float, where: str) -> None:
        self.deadline: Optional[float] = None  # None: the next turn starts the clock
        self.why: Optional[str] = None  # "interrupt" | "budget", set by the handler
        self.seconds, self.where = seconds, where


def guard(engine: Engine, where: str) -> Engine:
    """``engine``, every query of it under the budget and Ctrl-C (the module says how);
    ``where`` names the store in the budget's message. Call before the engine connects."""
    seconds = budget_s()
    dialect = engine.dialect.name
    if dialect == "postgresql":
        import campaign_sql.engine as sql_engine

        sql_engine.interrupt_heard = heard  # psycopg2's wait: a lost Ctrl-C cancels too

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, record: Any) -> None:
        clock = record.info[_KEY] = _Clock(seconds, where)
        if dialect == "sqlite":
            dbapi_conn.set_progress_handler(lambda: _turn(clock, seconds), PROGRESS_STEPS)
        elif dialect == "postgresql":
            cur = dbapi_conn.cursor()
            cur.execute(f"SET statement_timeout = {int(seconds * 1000)}")  # a number of ours, in ms
            cur.close()
            dbapi_conn.commit()

    @event.listens_for(engine, "checkout")
    def _on_checkout(dbapi_conn: Any, record: Any, proxy: Any) -> None:
        clock = record.info.get(_KEY)
        if clock is not None:  # a statement run past SQLAlchemy's events starts its own clock
            clock.deadline, clock.why = None, None

    @event.listens_for(engine, "before_cursor_execute")
    def _on_execute(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool) -> None:
        if heard():  # a Ctrl-C lost before the query (a finalizer's, or while connecting): none starts
            raise KeyboardInterrupt
        clock = conn.info.get(_KEY)
        if clock is not None:  # the budget runs from here to the last row fetched
            clock.deadline, clock.why = time.monotonic() + seconds, None

    @event.listens_for(engine, "handle_error")
    def _on_error(ctx: Any) -> Optional[BaseException]:
        return _translated(ctx, seconds, where)

    return engine


def _turn(clock: _Clock, seconds: float) -> int:
    """The progress handler: non-zero ends the query (SQLite raises "interrupted"). A
    Ctrl-C's ``KeyboardInterrupt`` raised as this is entered ends it too (sqlite3 drops
    the exception and ends the query), leaving ``why`` unset."""
    if heard():
        clock.why = "interrupt"
        return 1
    now = time.monotonic()
    if clock.deadline is None:
        clock.deadline = now + seconds
    elif now > clock.deadline:
        clock.why = "budget"
        return 1
    return 0


def _budget_error(seconds: float, where: str) -> StoreError:
    return StoreError(f"results store {where}: a query ran past its budget of {seconds:g} s ({ENV}); a store "
                      f"made to hang its readers (docs/security.md) or a very large one: set {ENV} higher to "
                      "wait longer")


def _ended(orig: BaseException, clock: Optional[_Clock], seconds: float, where: str) -> Optional[BaseException]:
    """What the database's error ``orig`` is raised as when the handler or the server's
    timeout ended the query (None: it did not)."""
    if isinstance(orig, sqlite3.OperationalError) and str(orig) == "interrupted":
        return _budget_error(seconds, where) if clock is not None and clock.why == "budget" else KeyboardInterrupt()
    code = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    if code == "57014" and "statement timeout" in str(orig):  # query_canceled, by statement_timeout
        return _budget_error(seconds, where)
    return None


def _translated(ctx: Any, seconds: float, where: str) -> Optional[BaseException]:
    """What a query ended by the handler or the server's timeout is raised as (None: the
    database's error as it is)."""
    conn = ctx.connection
    clock = conn.info.get(_KEY) if conn is not None and not conn.closed else None
    return _ended(ctx.original_exception, clock, seconds, where)


def fetch_all(conn: Any, result: Any) -> list:
    """Every row of ``result`` (run on ``conn``, a connection of a guarded engine) as the
    driver's plain tuples: no row objects, so a million rows cost what fetching them
    costs. SQLite runs the query while its rows are fetched, and SQLAlchemy's error events
    see nothing of a fetch from the driver's own cursor: a query the handler ends there
    (Ctrl-C, the budget) is raised here as ``guard`` raises it, any other database error
    as one ``StoreError`` line. The result is closed."""
    try:
        return result.cursor.fetchall()
    except conn.dialect.loaded_dbapi.Error as exc:
        from campaign.common.errors import one_line

        clock = conn.info.get(_KEY)
        seconds, where = (clock.seconds, clock.where) if clock is not None else (budget_s(), "(unnamed)")
        ended = _ended(exc, clock, seconds, where)
        raise (ended or StoreError(f"results store {where}: {one_line(str(exc))}")) from None
    finally:
        result.close()
