"""One statement executed for many rows (executemany), on SQLite compiled once.

SQLAlchemy builds each row's parameters in Python (``construct_params`` and the types'
bind processors, a few microseconds a row): a launch of 10,000 points writes 40,000 rows
in four statements. On SQLite (the ``qmark`` style: parameters by position) ``execute_many``
compiles the statement once, makes each row's tuple of parameters itself, with the same
bind processors (the JSON columns' ``dump_json``), and hands the driver the statement's
own SQL (``exec_driver_sql``: the engine's events, the query budget among them, still
run). A statement whose rows need more than their values (a Python-side default a row
leaves out) and every other database go through SQLAlchemy as they are.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional, Sequence

from sqlalchemy.sql import ClauseElement


def execute_many(conn: Any, stmt: ClauseElement, rows: Sequence[Mapping[str, Any]]) -> None:
    """``conn.execute(stmt, rows)``: the same rows written, by the fewest steps a row."""
    if not rows:
        return
    plan = _compiled(conn, stmt, rows) if conn.dialect.name == "sqlite" else None
    if plan is None:
        conn.execute(stmt, rows)
        return
    sql, getters = plan
    try:
        params = [tuple([get(r) for get in getters]) for r in rows]
    except KeyError:  # a row without a value another has: SQLAlchemy says so, its way
        conn.execute(stmt, rows)
        return
    conn.exec_driver_sql(sql, params)


def _compiled(conn: Any, stmt: ClauseElement, rows: Sequence[Mapping[str, Any]]) -> Optional[tuple[str, list]]:
    """The statement's SQL and, for each of its positional parameters, how a row gives it
    (its value through its type's bind processor, or the statement's own value); None
    when this cannot be done for every row alike."""
    dialect = conn.dialect
    keys = list(rows[0])
    if dialect.paramstyle != "qmark":
        return None
    compiled = stmt.compile(dialect=dialect, column_keys=keys)
    if (compiled.positiontup is None or compiled.insert_prefetch or compiled.update_prefetch
            or compiled.literal_execute_params or compiled.post_compile_params):
        return None  # a value made per row (a column's Python-side default), an expanding IN: SQLAlchemy's work
    getters: list[Callable[[Mapping[str, Any]], Any]] = []
    for name in compiled.positiontup:
        bind = compiled.binds[name]
        process = bind.type.dialect_impl(dialect).bind_processor(dialect)
        if name in keys:
            getters.append(_processed(name, process) if process else _plain(name))
        elif bind.callable is None and not bind.required:
            value = process(bind.value) if process else bind.value  # the statement's own (a literal)
            getters.append(lambda _r, v=value: v)
        else:
            return None
    return compiled.string, getters


def _plain(name: str) -> Callable[[Mapping[str, Any]], Any]:
    return lambda r: r[name]


def _processed(name: str, process: Callable[[Any], Any]) -> Callable[[Mapping[str, Any]], Any]:
    return lambda r: process(r[name])
