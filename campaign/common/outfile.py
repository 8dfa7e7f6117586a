"""Output files a read command writes (``harvest --out``, ``report --out``): never a store.

A read command that writes its output over the results store it read (``campaign harvest
--to csv --out results/campaign.db``), or over the store's write-ahead log or shared
memory file, would lose every campaign in it and still exit 0. An SQLite database is
known by its first 16 bytes (``SQLite format 3\\0``, the file format's header); its
``-wal``, ``-shm`` and ``-journal`` companions by their name beside one.
"""

from __future__ import annotations

from pathlib import Path

from campaign.common.errors import ConfigError

SQLITE_HEADER = b"SQLite format 3\x00"
COMPANIONS = ("-wal", "-shm", "-journal")


def is_sqlite(path: Path) -> bool:
    """Whether ``path`` is a file that starts as an SQLite database does."""
    try:
        with open(path, "rb") as fh:
            return fh.read(len(SQLITE_HEADER)) == SQLITE_HEADER
    except OSError:  # absent, a folder, unreadable: not one this command could tell
        return False


def check_output(path: Path | str, flag: str = "--out") -> Path:
    """``path``, or a ConfigError (one line) where writing it would overwrite an SQLite
    database or one of its companion files."""
    p = Path(path)
    base = next((p.with_name(p.name[: -len(s)]) for s in COMPANIONS if p.name.endswith(s) and p.name != s), None)
    if base is not None and is_sqlite(base):
        what = f"the {p.name[len(base.name):]} file of the SQLite database {base}"
    elif is_sqlite(p):
        what = "an SQLite database (a results store?)"
    else:
        return p
    raise ConfigError(f"{flag} {p} is {what}: not overwritten; give another file")
