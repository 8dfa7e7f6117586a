"""``python -m campaign_sql.group --store URL --group ROLE``: make a PostgreSQL results
store a group's shared store, where every member of ROLE reads every campaign and
writes only their own (``postgres_group.sql``; docs/security.md).

Run it as the role that owns the store's tables (never a member: row-level security
does not bind a table's owner), after creating the database. It creates the tables
when the database is empty, then applies the grants, the owner trigger and the
policies in one transaction; running it again (after a schema upgrade, say) is
harmless. Exit status 0, or 2 with one line saying what is wrong.
"""

from __future__ import annotations

import argparse
import re
import sys
from importlib import resources

# A plain PostgreSQL identifier: what a role name written without quotes may be.
_ROLE = re.compile(r"[a-z_][a-z0-9_$]{0,62}")


class GroupError(ValueError):
    """The store cannot be made a group store; the message is one line."""


def group_sql(group: str) -> str:
    """``postgres_group.sql`` for role ``group`` (``:group`` as an identifier,
    ``:'group'`` as a literal); ``GroupError`` for a name that is not a plain role name."""
    if not _ROLE.fullmatch(group):
        raise GroupError(f"--group {group!r} is not a plain PostgreSQL role name (lower-case letters, digits, '_', "
                         "'$'; not starting with a digit)")
    text = resources.files("campaign_sql").joinpath("postgres_group.sql").read_text()
    return text.replace(":'group'", f"'{group}'").replace(":group", f'"{group}"')


def make_group_store(url: str, group: str) -> str:
    """Create the schema if the database is empty and apply the group's policies.
    Returns what was done, in one line."""
    from sqlalchemy import text
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import SQLAlchemyError

    from campaign_sql.engine import SchemaMismatch, check_version, create_schema, make_engine, stored_version

    sql = group_sql(group)
    try:
        backend = make_url(url).get_backend_name()
    except Exception as exc:  # sqlalchemy.exc.ArgumentError: not a URL
        raise GroupError(f"--store: not a database URL ({exc})") from None
    if backend != "postgresql":
        raise GroupError(f"--store: a group store needs PostgreSQL (row-level security), not {backend}")
    engine = make_engine(url)
    try:
        created = stored_version(engine) is None
        if created:
            create_schema(engine)
        check_version(engine)
        with engine.begin() as conn:
            owner = conn.execute(text("SELECT tableowner FROM pg_tables WHERE tablename = 'campaign'")).scalar()
            me = conn.execute(text("SELECT current_user")).scalar()
            if owner != me:
                raise GroupError(f"run this as the tables' owner ({owner}), not {me}: row-level security does not "
                                 "bind a table's owner, and only the owner may create policies")
            if not conn.execute(text("SELECT 1 FROM pg_roles WHERE rolname = :g"), {"g": group}).scalar():
                raise GroupError(f"no role {group!r} in this server; as a superuser: CREATE ROLE {group} NOLOGIN; "
                                 f"then GRANT {group} TO <each member>")
            # through the driver's cursor without parameters: the file's format('%I') is no placeholder
            with conn.connection.cursor() as cur:
                cur.execute(sql)
    except SchemaMismatch as exc:
        raise GroupError(f"the store's schema version is {exc.found}, not this campaign's: upgrade it first "
                         "(any writing campaign command, run as the owner)") from None
    except SQLAlchemyError as exc:
        first = str(getattr(exc, "orig", exc)).strip().splitlines()[0]
        raise GroupError(f"cannot apply the group policies: {first}") from None
    finally:
        engine.dispose()
    return (f"{'created the tables and ' if created else ''}made the store a group store for role {group}: "
            "members read every campaign and write only their own")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m campaign_sql.group", description=__doc__.split("\n\n")[0])
    p.add_argument("--store", required=True, metavar="URL", help="the PostgreSQL store, as its tables' owner")
    p.add_argument("--group", required=True, metavar="ROLE", help="the role whose members share the store")
    args = p.parse_args(argv)
    try:
        print(make_group_store(args.store, args.group))
    except GroupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
