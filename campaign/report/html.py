"""The report's HTML pieces: escaped text, UTC dates, key-value lists, harvest's tables
and figures. Pure functions of their inputs (no clock, locale or time zone read).

A table cell shows what harvest's terminal table shows of the value (floats to four
places: campaign.harvest.export's display) and carries harvest's CSV text of the same
value in ``data-v`` (the CSV writer's own output, parsed back): a reader, or the
browser test, can check each shown value against ``campaign harvest --to csv``.
"""

from __future__ import annotations

import csv
import datetime as dt
import html
import io
import re
from typing import Any, Iterable, Optional, Sequence

import polars as pl

from campaign.common.text import printable


# Text neither printable() nor html.escape() changes: a table's numbers and names, passed as
# they are (tens of thousands of cells in a 1,000-point campaign's tables).
_INERT = re.compile(r"[A-Za-z0-9 _.,:;+\-/=()%#@\[\]]*")


def esc(value: Any) -> str:
    """Text from the store (names, reasons, paths, overrides) made inert in HTML: control
    characters as visible escapes (campaign.common.text.printable), then HTML-escaped."""
    if isinstance(value, str) and _INERT.fullmatch(value):
        return value
    return html.escape("" if value is None else str(printable(value)), quote=True)


def utc(t: Optional[float]) -> str:
    """A unix time as ``2026-11-24T01:10:44Z`` (UTC, whatever the machine's zone); ``-`` when absent."""
    if not t:
        return "-"
    return dt.datetime.fromtimestamp(float(t), dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def number(value: Optional[float], places: int = 2) -> str:
    """A figure with ``places`` decimals (``.``, never the locale's separator); ``-`` when absent."""
    return "-" if value is None else f"{value:.{places}f}"


def keyvalues(rows: Iterable[tuple[str, str]]) -> str:
    """A definition list of (label, already-escaped HTML) rows."""
    items = "".join(f"<dt>{esc(k)}</dt><dd>{v}</dd>" for k, v in rows)
    return f"<dl class=\"kv\">{items}</dl>"


def csv_cells(df: pl.DataFrame) -> list[list[str]]:
    """``df``'s cells as harvest's CSV export writes them (campaign.harvest.export.render)."""
    from campaign.harvest.export import render

    return list(csv.reader(io.StringIO(render(df, "csv").decode())))[1:]


def table(name: str, df: pl.DataFrame, shown: Optional[Sequence[str]] = None) -> str:
    """``df`` as an HTML table of the columns ``shown`` (default: all); each cell shows the
    terminal's value and carries the CSV export's text in ``data-v``."""
    from campaign.harvest.export import _display

    cols = [c for c in (shown or df.columns) if c in df.columns]
    if df.height == 0 or not cols:
        return ""
    part = df.select(cols)
    _, rows = _display(part)
    exact = csv_cells(part)
    head = "".join(f"<th>{esc(c)}</th>" for c in cols)
    body = []
    for shown_row, csv_row in zip(rows, exact):
        cells = "".join(f"<td data-v=\"{esc(v)}\">{esc(s)}</td>" for s, v in zip(shown_row, csv_row))
        body.append(f"<tr>{cells}</tr>")
    return (f"<div class=\"scroll\"><table data-table=\"{esc(name)}\"><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table></div>")


def figure(name: str, svg: str, caption: str) -> str:
    """One inline SVG figure (harvest's, campaign.report.svg) with its caption."""
    return f"<figure data-figure=\"{esc(name)}\">{svg}<figcaption>{esc(caption)}</figcaption></figure>"


def section(key: str, title: str, body: str) -> str:
    """One section of the page; empty when it has nothing to show."""
    if not body:
        return ""
    return f"<section id=\"{esc(key)}\"><h2>{esc(title)}</h2>{body}</section>\n"


def para(text: str) -> str:
    return f"<p>{esc(text)}</p>"
