"""Dropping a test's PostgreSQL database, shared by every test that makes one."""

from __future__ import annotations

import time


def drop_database(admin, name: str, tries: int = 40) -> None:
    """Drop database ``name`` through ``admin`` (an AUTOCOMMIT engine).

    ``WITH (FORCE)`` is refused (InsufficientPrivilege) to a role that is not a superuser
    while an autovacuum worker, a superuser's process, is in the database, which it often is
    right after a test's inserts; then a plain DROP is retried until the worker has left.
    The last try raises, so a database that cannot be dropped fails its test loudly."""
    from sqlalchemy.exc import DBAPIError

    for attempt in range(tries):
        try:
            with admin.connect() as conn:
                conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}"' + (" WITH (FORCE)" if attempt == 0 else ""))
            return
        except DBAPIError:
            time.sleep(0.5)
    with admin.connect() as conn:
        conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}"')
