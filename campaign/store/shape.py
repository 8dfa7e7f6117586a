"""A store's shape, checked before a row of it is read (issue #41, finding 5).

A store that others can write can hold more than rows: SQLite and PostgreSQL both let
its writer replace a table by a view, or add triggers, and a query of ours then runs
their SQL. A view ``campaign`` over an endless recursive CTE held ``status``,
``harvest``, ``report`` and ``plan`` at 100 % CPU, deaf to Ctrl-C. So ``open_store``
checks, before it reads even the schema version, that every table the schema names is
a table (not a view, a virtual or foreign table, nor one with computed columns), and
that the store holds no view and no trigger its schema did not create:

- SQLite stores have none (``sql/schema.sql``, every migration in ``sql/migrate.py``);
- a group's PostgreSQL store has one trigger, ``campaign_owner`` on ``campaign``
  (``sql/postgres_group.sql``), besides the foreign keys' own (internal) ones.

A table the schema does not name is left alone (nothing of ours reads it), and so are
indexes. What the check cannot see (a store merely large, or a policy that is slow) is
bounded by the query budget (``campaign.store.budget``).
"""

from __future__ import annotations

from typing import Callable

from sqlalchemy import text
from sqlalchemy.engine import Connection, Engine

from campaign.common.errors import StoreError
from campaign_sql.schema import metadata

TABLES = tuple(sorted(metadata.tables))  # every table a store of any version may hold
# (table, trigger, function) a group store's postgres_group.sql creates
GROUP_TRIGGERS = {("campaign", "campaign_owner", "campaign_owner_is_writer")}
PG_TABLE_KINDS = {"r": "table", "p": "partitioned table"}
PG_KINDS = {"v": "view", "m": "materialized view", "f": "foreign table", "c": "composite type", "S": "sequence",
            "i": "index", "I": "partitioned index", "t": "TOAST table"}


def check_shape(engine: Engine, where: str) -> None:
    """Raise ``StoreError`` (one line naming the first thing found and the fix) unless
    the store at ``engine`` has the shape the module describes; ``where`` names the
    store in the message. Reads the database's catalogue only, never a table of ours."""
    check = CHECKS.get(engine.dialect.name)
    if check is None:
        return
    with engine.connect() as conn:
        problems = check(conn)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise StoreError(f"results store {where} is not shaped as a campaign store: {problems[0]}{more}; "
                         "campaign reads no store whose tables run SQL of their own (docs/security.md); "
                         "ask its owner to restore it, or name another with --store URL")


def _sqlite_problems(conn: Connection) -> list[str]:
    """Views and triggers, and the schema's tables as SQLite finds them (its names are
    case-blind); only those rows of the catalogue are read, a few bytes of each."""
    ours = ", ".join(f"'{name}'" for name in TABLES)  # names of ours, not the store's
    rows = conn.exec_driver_sql(
        "SELECT type, name, tbl_name, upper(ltrim(substr(sql, 1, 40))) FROM sqlite_master "
        f"WHERE type IN ('view', 'trigger') OR (type = 'table' AND lower(name) IN ({ours}))").all()
    problems = []
    for kind, name, table, head in rows:
        if kind != "table":
            on = f" on {table!r}" if kind == "trigger" else ""
            problems.append(f"{kind} {name!r}{on} (a campaign store has none)")
        elif str(head or "").startswith("CREATE VIRTUAL"):
            problems.append(f"table {name!r} is a virtual table")
        else:
            # hidden 2 and 3: generated columns (computed as they are read)
            computed = [r[1] for r in conn.exec_driver_sql(f'PRAGMA table_xinfo("{name.lower()}")').all() if r[6]]
            if computed:
                problems.append(f"table {name!r} has computed columns ({', '.join(map(repr, computed))})")
    return problems


def _postgres_problems(conn: Connection) -> list[str]:
    """Each schema table as a query of ours resolves it (the search path: a view in a
    schema before ``public`` would shadow the table), and the triggers and rules on them."""
    problems, oids = [], {}
    for name in TABLES:
        row = conn.execute(text("SELECT c.oid, c.relkind, n.nspname FROM pg_class c "
                                "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass(:t)"),
                           {"t": f'"{name}"'}).first()
        if row is None:  # not there: a store of an older version, or none (the version check says)
            continue
        oid, kind, schema = row
        if kind not in PG_TABLE_KINDS:
            problems.append(f"{name!r} is a {PG_KINDS.get(kind, 'relation of kind ' + repr(kind))} ({schema}.{name})")
            continue
        oids[oid] = name
        computed = conn.execute(text("SELECT attname FROM pg_attribute WHERE attrelid = :o AND attgenerated <> '' "
                                     "AND attnum > 0 AND NOT attisdropped"), {"o": oid}).scalars().all()
        if computed:
            problems.append(f"table {name!r} has computed columns ({', '.join(map(repr, computed))})")
    if not oids:
        return problems
    triggers = conn.execute(text("SELECT t.tgrelid, t.tgname, p.proname FROM pg_trigger t "
                                 "JOIN pg_proc p ON p.oid = t.tgfoid WHERE NOT t.tgisinternal "
                                 "AND t.tgrelid = ANY(:oids)"), {"oids": list(oids)}).all()
    for rel, trigger, function in triggers:
        if (oids[rel], trigger, function) not in GROUP_TRIGGERS:
            problems.append(f"trigger {trigger!r} on {oids[rel]!r} (runs {function}(); a group store has only "
                            "campaign_owner on 'campaign')")
    rules = conn.execute(text("SELECT ev_class, rulename FROM pg_rewrite WHERE ev_class = ANY(:oids)"),
                         {"oids": list(oids)}).all()
    problems += [f"rule {rule!r} on {oids[rel]!r} (a campaign store has none)" for rel, rule in rules]
    return problems


# the dialects whose catalogue is read; another database SQLAlchemy reads is not checked
CHECKS: dict[str, Callable[[Connection], list[str]]] = {"sqlite": _sqlite_problems, "postgresql": _postgres_problems}
