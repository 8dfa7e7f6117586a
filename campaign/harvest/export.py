"""Exports of harvested tables: csv, parquet, json, markdown (or a terminal table).

One table goes to a file (``--out FILE``) or standard output. Several tables
(``--table all``) go to a folder (``--out DIR``: DIR/<table>.<ext>) or, on standard
output, one after another under their titles (csv: a ``# title`` line before each;
json: one object keyed by table name; parquet needs a folder).

Files keep the data as it is. What goes to standard output (a terminal, or a pipe a
terminal may show) has its text cells, column names and titles escaped
(campaign.text.printable: a campaign name or override value from the store cannot
retitle the window or reorder the line), and JSON there is pure ASCII (``\\u`` escapes).
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Optional, Sequence

import polars as pl
from tabulate import tabulate

from campaign.errors import ConfigError
from campaign.text import printable

FORMATS = ("csv", "json", "markdown", "parquet", "table")
EXTENSIONS = {"csv": "csv", "json": "json", "markdown": "md", "parquet": "parquet", "table": "txt"}


def _display(df: pl.DataFrame) -> tuple[list[str], list[list]]:
    rows = []
    for r in df.iter_rows():
        rows.append(["-" if v is None else (round(v, 4) if isinstance(v, float) else v) for v in r])
    return df.columns, rows


def printable_frame(df: pl.DataFrame) -> pl.DataFrame:
    """``df`` with its text cells and column names escaped (campaign.text.printable)."""
    text = [c for c, t in df.schema.items() if t == pl.Utf8]
    if text:
        df = df.with_columns(pl.col(c).map_elements(printable, return_dtype=pl.Utf8) for c in text)
    names = {c: printable(c) for c in df.columns if printable(c) != c}
    return df.rename(names) if names else df


def _ascii_json(text: str) -> str:
    """JSON text re-encoded with every non-ASCII and control character as a ``\\u`` escape."""
    return json.dumps(json.loads(text), separators=(",", ":"))


def _check(fmt: str) -> None:
    if fmt not in FORMATS:
        raise ConfigError(f"unknown format '{fmt}'; available: {', '.join(FORMATS)}")


def render(df: pl.DataFrame, fmt: str) -> bytes:
    """One table in one format (absent values: empty in csv, null in json, "-" in text)."""
    _check(fmt)
    if fmt == "csv":
        return df.write_csv().encode()
    if fmt == "json":
        return (df.write_json() + "\n").encode()
    if fmt == "parquet":
        buf = io.BytesIO()
        df.write_parquet(buf)
        return buf.getvalue()
    headers, rows = _display(df)
    return (tabulate(rows, headers=headers, tablefmt="github" if fmt == "markdown" else "simple") + "\n").encode()


def _write_bytes(path: Path, data: bytes) -> Path:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror}") from exc
    return path


def write(df: pl.DataFrame, fmt: str, out: Optional[str]) -> Optional[Path]:
    """Write to ``out`` (a file, made with its folder) or standard output."""
    if out is None:
        if fmt == "parquet":
            raise ConfigError("parquet is binary: give a file with --out PATH")
        if fmt == "json":
            sys.stdout.write(_ascii_json(df.write_json()) + "\n")
        else:
            sys.stdout.write(render(printable_frame(df), fmt).decode())
        return None
    return _write_bytes(Path(out), render(df, fmt))


def write_tables(tables: Sequence[tuple[str, str, pl.DataFrame]], fmt: str, out: Optional[str]) -> list[Path]:
    """Write (name, title, frame) tables: one as ``write`` does, several as the module says."""
    _check(fmt)
    if len(tables) == 1:
        path = write(tables[0][2], fmt, out)
        return [path] if path else []
    if out is not None:
        folder = Path(out)
        if folder.exists() and not folder.is_dir():
            raise ConfigError(f"--out {folder} is a file; several tables need a folder (--out DIR)")
        return [_write_bytes(folder / f"{name}.{EXTENSIONS[fmt]}", render(df, fmt)) for name, _, df in tables]
    if fmt == "parquet":
        raise ConfigError("parquet is binary: give a folder with --out DIR for several tables")
    if fmt == "json":
        doc = {name: json.loads(df.write_json()) for name, _, df in tables}
        sys.stdout.write(json.dumps(doc) + "\n")
        return []
    for i, (name, title, df) in enumerate(tables):
        if i:
            sys.stdout.write("\n")
        if fmt == "csv":
            sys.stdout.write(printable(f"# {name}: {title}") + "\n")
        else:
            sys.stdout.write(printable(f"{'## ' if fmt == 'markdown' else ''}{title}") + "\n\n")
        sys.stdout.write(render(printable_frame(df), fmt).decode())
    return []
