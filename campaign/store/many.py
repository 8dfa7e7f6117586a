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

import operator
from typing import Any, Callable, Mapping, Optional, Sequence

from sqlalchemy.sql import ClauseElement


def execute_many(conn: Any, stmt: ClauseElement, rows: Sequence[Mapping[str, Any]]) -> None:
    """``conn.execute(stmt, rows)``: the same rows written, by the fewest steps a row."""
    if not rows:
        return
    make = _compiled(conn, stmt, rows) if conn.dialect.name == "sqlite" else None
    if make is None:
        conn.execute(stmt, rows)
        return
    sql, params = make
    try:
        values = params(rows)
    except KeyError:  # a row without a value another has: SQLAlchemy says so, its way
        conn.execute(stmt, rows)
        return
    conn.exec_driver_sql(sql, values)


def _compiled(conn: Any, stmt: ClauseElement, rows: Sequence[Mapping[str, Any]]) -> Optional[tuple[str, Callable]]:
    """The statement's SQL and a function of the rows that gives each row's tuple of
    positional parameters (its values, through their types' bind processors, and the
    statement's own values); None when this cannot be done for every row alike."""
    dialect = conn.dialect
    keys = list(rows[0])
    if dialect.paramstyle != "qmark":
        return None
    compiled = stmt.compile(dialect=dialect, column_keys=keys)
    names = compiled.positiontup
    if (not names or compiled.insert_prefetch or compiled.update_prefetch
            or compiled.literal_execute_params or compiled.post_compile_params):
        return None  # a value made per row (a column's Python-side default), an expanding IN: SQLAlchemy's work
    own: dict[str, Any] = {}  # the statement's own values (literals), by name
    processed: list[tuple[int, Callable[[Any], Any]]] = []  # (position, bind processor) of the rows' values
    for i, name in enumerate(names):
        bind = compiled.binds[name]
        process = bind.type.dialect_impl(dialect).bind_processor(dialect)
        if name in keys:
            if process is not None:
                processed.append((i, process))
        elif bind.callable is None and not bind.required:
            own[name] = process(bind.value) if process else bind.value
        else:
            return None
    get = operator.itemgetter(*names) if len(names) > 1 else (lambda r: (r[names[0]],))

    def params(rows: Sequence[Mapping[str, Any]]) -> list[tuple]:
        values = list(map(get, [{**r, **own} for r in rows] if own else rows))  # in C but for the processors
        if processed:
            for j, row in enumerate(values):
                row = list(row)
                for i, process in processed:
                    row[i] = process(row[i])
                values[j] = tuple(row)
        return values

    return compiled.string, params
