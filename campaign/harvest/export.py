"""Exports of a harvested table: csv, parquet, json, markdown (or a terminal table)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Optional

import polars as pl
from tabulate import tabulate

from campaign.errors import ConfigError

FORMATS = ("csv", "json", "markdown", "parquet", "table")


def _display(df: pl.DataFrame) -> tuple[list[str], list[list]]:
    rows = []
    for r in df.iter_rows():
        rows.append(["-" if v is None else (round(v, 4) if isinstance(v, float) else v) for v in r])
    return df.columns, rows


def render(df: pl.DataFrame, fmt: str) -> bytes:
    if fmt not in FORMATS:
        raise ConfigError(f"unknown format '{fmt}'; available: {', '.join(FORMATS)}")
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


def write(df: pl.DataFrame, fmt: str, out: Optional[str]) -> Optional[Path]:
    """Write to ``out`` (a file, made with its folder) or standard output."""
    data = render(df, fmt)
    if out is None:
        if fmt == "parquet":
            raise ConfigError("parquet is binary: give a file with --out PATH")
        import sys

        sys.stdout.write(data.decode())
        return None
    path = Path(out)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror}") from exc
    return path
