"""Exports of harvested tables, and the registry of their formats (``--to NAME``).

A format is one ``ExportFormat``: its name, the extension of its files, a writer (one
polars frame -> the file's bytes) and whether it is binary (never to standard output).
``register_format`` adds one; ``campaign harvest --to`` accepts every registered name
and its ``--help`` lists them (``format_help``). Light on purpose (polars and tabulate
are imported by the writers): the CLI reads the names to build its parser.

One table goes to a file (``--out FILE``) or standard output. Several tables
(``--table all``) go to a folder (``--out DIR``: DIR/<table>.<ext>) or, on standard
output, one after another under their headings (csv: a ``# name: title`` line before
each; json: one object keyed by table name; a binary format needs a folder).

Files keep the data as it is, but for what would act on it where the file is read:
CSV text cells starting like a spreadsheet formula (``=``, ``+``, ``-``, ``@``, tab, CR)
get a ``'`` before them, and markdown cells have ``|``, ``\\`` and HTML escaped and
newlines as ``<br>`` (``ExportFormat.safe``); ``--raw`` keeps them as stored. What goes
to standard output (a terminal, or a pipe a terminal may show) has its text cells,
column names and titles escaped
(campaign.common.text.printable: a campaign name or override value from the store cannot
retitle the window or reorder the line), and JSON there is pure ASCII (``\\u`` escapes).
"""

from __future__ import annotations

import io
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional, Sequence

from campaign.common.errors import ConfigError
from campaign.common.outfile import check_output, write_output
from campaign.common.text import printable

if TYPE_CHECKING:
    import polars as pl

DEFAULT = "table"  # what --to is when not given: a terminal table


def _title(name: str, title: str) -> str:
    return printable(title) + "\n\n"


@dataclass(frozen=True)
class ExportFormat:
    """One export format; registered with ``register_format``."""

    name: str  # what --to takes
    extension: str  # the suffix of its files in a folder of several tables (DIR/<table>.<extension>)
    writer: Callable[["pl.DataFrame"], bytes]  # one frame -> the bytes of its file (the data as it is)
    binary: bool = False  # True: never written to standard output (--out is required)
    # the text before each of several tables on standard output (escaped by this function: printable)
    heading: Callable[[str, str], str] = _title
    # one table on standard output; None: the writer's output of the escaped frame (printable_frame)
    show: Optional[Callable[["pl.DataFrame"], str]] = None
    # several (name, title, frame) tables on standard output as one document; None: each under its heading
    show_many: Optional[Callable[[Sequence[tuple[str, str, "pl.DataFrame"]]], str]] = None
    # the frame made safe for what reads the file (a markdown renderer, a spreadsheet) before the
    # writer sees it, file or standard output; --raw skips it. None: written as it is
    safe: Optional[Callable[["pl.DataFrame"], "pl.DataFrame"]] = None


FORMATS: dict[str, ExportFormat] = {}  # name -> format, in name order (the order --help and errors list)


def register_format(fmt: ExportFormat) -> ExportFormat:
    """Add ``fmt`` to the formats ``campaign harvest --to`` takes (a name registered twice is a bug)."""
    if fmt.name in FORMATS:
        raise ValueError(f"export format {fmt.name!r} is registered already")
    # the same dict, re-filled in name order: modules that imported FORMATS see the new entry
    entries = sorted([*FORMATS.values(), fmt], key=lambda f: f.name)
    FORMATS.clear()
    FORMATS.update((f.name, f) for f in entries)
    return fmt


def get_format(name: str) -> ExportFormat:
    """The registered format ``name``; a ConfigError naming the registered ones otherwise."""
    if name not in FORMATS:
        raise ConfigError(f"unknown format '{name}'; available: {', '.join(FORMATS)}")
    return FORMATS[name]


def format_of(out: Optional[str]) -> str:
    """The format ``--out FILE`` asks for by its extension where ``--to`` is not given
    (``--out t.csv``: csv), else the default: a file named .csv holds CSV, not the terminal's
    table."""
    suffix = Path(out).name.rpartition(".")[2].lower() if out and "." in Path(out).name else ""
    return next((name for name, spec in FORMATS.items() if suffix and spec.extension == suffix), DEFAULT)


def format_help() -> str:
    """``--to``'s help: ``table (default), csv, json, markdown or parquet`` (the registered names)."""
    others = [n for n in FORMATS if n != DEFAULT]
    listed = f"{', '.join(others[:-1])} or {others[-1]}" if len(others) > 1 else "".join(others)
    return f"{DEFAULT} (default), {listed}" if listed else f"{DEFAULT} (default)"


# ------------------------------------------------------------------ the built-in formats

def shown(v: float) -> float:
    """A float as the terminal and markdown tables show it: 4 decimals from 1 up, 4
    significant digits below (a time per image of 1.9e-5 s stays 1.9e-05, not 0.0)."""
    if not math.isfinite(v):
        return v
    if v == 0 or abs(v) >= 1:
        return round(v, 4)
    return round(v, 3 - math.floor(math.log10(abs(v))))


def _display(df: "pl.DataFrame") -> tuple[list[str], list[list]]:
    rows = []
    for r in df.iter_rows():
        rows.append(["-" if v is None else (shown(v) if isinstance(v, float) else v) for v in r])
    return df.columns, rows


def _tabulated(tablefmt: str) -> Callable[["pl.DataFrame"], bytes]:
    def writer(df: "pl.DataFrame") -> bytes:
        from campaign.common import table as tables

        headers, rows = _display(df)
        return (tables.render(rows, headers=headers, tablefmt=tablefmt) + "\n").encode()

    return writer


def _parquet(df: "pl.DataFrame") -> bytes:
    buf = io.BytesIO()
    df.write_parquet(buf)
    return buf.getvalue()


def _ascii_json(text: str) -> str:
    """JSON text re-encoded with every non-ASCII and control character as a ``\\u`` escape."""
    return json.dumps(json.loads(text), separators=(",", ":"))


def _text_cells(df: "pl.DataFrame", fix: Callable[[str], str]) -> "pl.DataFrame":
    """``df`` with ``fix`` applied to its text cells and column names (numbers never)."""
    import polars as pl

    text = [c for c, t in df.schema.items() if t == pl.Utf8]
    if text:
        df = df.with_columns(pl.col(c).map_elements(fix, return_dtype=pl.Utf8) for c in text)
    names = {c: fix(c) for c in df.columns if fix(c) != c}
    return df.rename(names) if names else df


FORMULA_START = ("=", "+", "-", "@", "\t", "\r")  # what a spreadsheet reads as a formula (CSV injection)


def defused(cell: str) -> str:
    """A CSV text cell a spreadsheet shows as text: ``'`` before one that starts like a formula."""
    return "'" + cell if cell.startswith(FORMULA_START) else cell


# ``[`` and ``]`` backslash-escaped: no link (``[x](javascript:...)``) or image (``![](https://pixel)``,
# fetched when the page is opened) is made of a stored name; ``<`` as an entity: no autolink.
_MARKDOWN = str.maketrans({"\\": "\\\\", "|": "\\|", "&": "&amp;", "<": "&lt;", ">": "&gt;", "\n": "<br>",
                           "\r": "", "[": "\\[", "]": "\\]"})


def markdown_cell(cell: str) -> str:
    """A markdown table cell that renders as the text it holds: ``|`` and ``\\`` backslash-escaped
    (the row keeps its columns), HTML entity-escaped (``<script>`` is text), newlines ``<br>``,
    ``[``/``]`` escaped so that no link or image syntax survives (a tracking pixel, a ``javascript:`` link)."""
    return cell.translate(_MARKDOWN)


for _fmt in (
    ExportFormat("csv", "csv", lambda df: df.write_csv().encode(),
                 heading=lambda name, title: printable(f"# {name}: {title}") + "\n",
                 safe=lambda df: _text_cells(df, defused)),
    ExportFormat("json", "json", lambda df: (df.write_json() + "\n").encode(),
                 show=lambda df: _ascii_json(df.write_json()) + "\n",
                 show_many=lambda tables: json.dumps({n: json.loads(df.write_json()) for n, _, df in tables}) + "\n"),
    ExportFormat("markdown", "md", _tabulated("github"), safe=lambda df: _text_cells(df, markdown_cell),
                 heading=lambda name, title: printable(f"## {markdown_cell(title)}") + "\n\n"),
    ExportFormat("parquet", "parquet", _parquet, binary=True),
    ExportFormat("table", "txt", _tabulated("simple")),
):
    register_format(_fmt)


# ------------------------------------------------------------------ writing

def printable_frame(df: "pl.DataFrame") -> "pl.DataFrame":
    """``df`` with its text cells and column names escaped (campaign.common.text.printable)."""
    return _text_cells(df, printable)


def render(df: "pl.DataFrame", fmt: str) -> bytes:
    """One table in one format, its data as stored (absent values: empty in csv, null in json, "-" in text)."""
    return get_format(fmt).writer(df)


def _safe(spec: ExportFormat, df: "pl.DataFrame", raw: bool) -> "pl.DataFrame":
    return df if raw or spec.safe is None else spec.safe(df)


def _written(spec: ExportFormat, df: "pl.DataFrame", raw: bool) -> bytes:
    """One table as its file holds it: made safe for its readers (``spec.safe``) unless ``raw``."""
    return spec.writer(_safe(spec, df, raw))


def file_bytes(df: "pl.DataFrame", fmt: str, *, raw: bool = False) -> bytes:
    """One table in format ``fmt`` as its file holds it (made safe unless ``raw``), for a
    caller that writes the file itself (campaign figures, through campaign.common.outfile)."""
    return _written(get_format(fmt), df, raw)


def _shown(spec: ExportFormat, df: "pl.DataFrame", raw: bool = False) -> str:
    """One table as standard output shows it (made safe unless ``raw``, then escaped)."""
    return spec.show(df) if spec.show else spec.writer(printable_frame(_safe(spec, df, raw))).decode()


def _write_bytes(path: Path, data: bytes) -> Path:
    # never over a results store, never through a link nor into a FIFO (campaign.common.outfile)
    return write_output(path, data)


def write(df: "pl.DataFrame", fmt: str, out: Optional[str], *, raw: bool = False) -> Optional[Path]:
    """Write to ``out`` (a file, made with its folder) or standard output; ``raw``: text
    cells as stored, not made safe for a spreadsheet or a markdown renderer (--raw)."""
    spec = get_format(fmt)
    if out is None:
        if spec.binary:
            raise ConfigError(f"{fmt} is binary: give a file with --out PATH")
        sys.stdout.write(_shown(spec, df, raw))
        return None
    return _write_bytes(Path(out), _written(spec, df, raw))


def write_tables(tables: Sequence[tuple[str, str, "pl.DataFrame"]], fmt: str, out: Optional[str], *,
                 raw: bool = False) -> list[Path]:
    """Write (name, title, frame) tables: one as ``write`` does, several as the module says."""
    spec = get_format(fmt)
    if len(tables) == 1:
        path = write(tables[0][2], fmt, out, raw=raw)
        return [path] if path else []
    if out is not None:
        folder = Path(out)
        if folder.exists() and not folder.is_dir():
            raise ConfigError(f"--out {folder} is a file; several tables need a folder (--out DIR)")
        paths = [check_output(folder / f"{name}.{spec.extension}") for name, _, _ in tables]  # all, before any
        return [_write_bytes(path, _written(spec, df, raw)) for path, (_, _, df) in zip(paths, tables)]
    if spec.binary:
        raise ConfigError(f"{fmt} is binary: give a folder with --out DIR for several tables")
    if spec.show_many:
        sys.stdout.write(spec.show_many(tables))
        return []
    for i, (name, title, df) in enumerate(tables):
        if i:
            sys.stdout.write("\n")
        sys.stdout.write(spec.heading(name, title))
        sys.stdout.write(_shown(spec, df, raw))
    return []
