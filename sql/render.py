"""Render the schema as SQLite DDL: ``python -m campaign_sql.render > sql/schema.sql``.

tests/test_store.py checks that sql/schema.sql matches this rendering.
"""

from __future__ import annotations

from sqlalchemy.dialects import sqlite
from sqlalchemy.schema import CreateIndex, CreateTable

from campaign_sql.schema import SCHEMA_VERSION, metadata


def render() -> str:
    dialect = sqlite.dialect()
    out = [f"-- campaign results store, schema version {SCHEMA_VERSION} (SQLite rendering of sql/schema.py)", ""]
    for table in metadata.sorted_tables:
        out.append(str(CreateTable(table).compile(dialect=dialect)).strip() + ";")
        for index in sorted(table.indexes, key=lambda i: i.name):
            out.append(str(CreateIndex(index).compile(dialect=dialect)).strip() + ";")
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    print(render(), end="")
