"""Tables for the terminal: tabulate's "simple" tables, without its per-cell number sniffing
where a column is text anyway.

tabulate types a column by parsing every cell as a number (its costliest step: ~2 s of a
10,000-point table on 2 cores), and a column with one cell that is text, not a number, is
text whatever the others hold. ``render`` finds such a cell first (usually in the first
row) and tells tabulate not to parse that column (``disable_numparse``, its documented
option): the same table, byte for byte (tests/test_table.py), sooner.
"""

from __future__ import annotations

from typing import Any, Sequence

from tabulate import tabulate


def _surely_text(cell: Any) -> bool:
    """A cell tabulate takes as text in every case: a non-empty str that is no number in
    any form it reads (float syntax, thousands separators, "True"/"False", numbers wrapped
    in terminal escapes)."""
    if not isinstance(cell, str) or not cell.strip() or "\x1b" in cell or cell in ("True", "False"):
        return False
    try:
        float(cell.replace(",", ""))
    except ValueError:
        return True
    return False


def text_columns(rows: Sequence[Sequence[Any]]) -> list[int]:
    """The columns of ``rows`` with a cell that is surely text (tabulate: a text column)."""
    width = max((len(r) for r in rows), default=0)
    return [j for j in range(width) if any(j < len(r) and _surely_text(r[j]) for r in rows)]


def render(rows: Sequence[Sequence[Any]], headers: Any = (), tablefmt: str = "simple", **kw: Any) -> str:
    """``tabulate(rows, headers, tablefmt)``, its number parsing left out of text columns."""
    rows = [list(r) for r in rows]
    text = text_columns(rows)
    return tabulate(rows, headers=headers, tablefmt=tablefmt, disable_numparse=text or False, **kw)
