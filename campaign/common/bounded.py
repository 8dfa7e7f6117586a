"""JSON from places others can write, parsed within bounds.

A shared store, a spool file in a shared results folder or a profiler trace handed
over by a colleague is data that anyone with write access shaped: a value nested ten
thousand levels deep makes Python's ``json`` (and every walk over its result) raise
``RecursionError``; a line of gigabytes, or a small gzip that expands to gigabytes,
exhausts memory. Every such input is parsed here, with a size limit and a nesting
limit checked *before* the parser sees the text, and any failure becomes one
``BoundError`` line naming what was read. A store's JSON columns come through
``stored`` (every engine ``open_store`` makes), a bad value as ``Unreadable``. Stdlib
only. ``campaign_trace`` (shared with the job side, which imports nothing of the host:
tests/test_import_graph.py) reads traces within the same bounds itself.

Bytes are not memory (issue #41, finding 8): ``[{},{},...]`` takes 72 bytes of Python
objects for every 3 bytes of text, so a 57 MiB stored config took 1.5-3 GB. So the
parser's work is bounded by what it would build, counted before it starts: its
*elements* (every ``{``, ``[``, ``,`` and ``:``, strings' contents included: an
over-count, in C, no copy), each taking at most ``ELEMENT_BYTES`` of objects, plus the
text itself and its strings' payloads (``memory``). Per value: at most ``MAX_ELEMENTS``.
Per command: what the store's JSON columns make, which a read command keeps, all of it
together, is at most ``STORED``'s budget (``CAMPAIGN_JSON_MAX_MEMORY_MB``, default 1024);
past it, a value is ``Unreadable`` with that reason, and the command goes on.

The store's own JSON functions (SQLite's ``json_extract``/``json_valid``, PostgreSQL's
``->``/``->>``: harvest's SQL, campaign.harvest.query) parse in the database, where none of
the above looks: SQLite's parse of a 180 MB ``[{},{},...]`` took 1.48 GB (issue #48). So
the SQL hands them a value only when its length is at most ``sql_max_chars()``: the
longest text whose ``memory`` figure could not pass the command's whole budget (a
character is at most one counted element). Harvest leaves a point with a longer value
out, in one warning line naming it.
"""

from __future__ import annotations

import json
import re
from itertools import accumulate
from typing import Any, Optional, Union

MAX_DEPTH = 64  # no config, spool operation or trace campaign writes nests deeper than ~12
MAX_TEXT = 64 * 2**20  # one stored config, one spool line: far below this
MAX_TRACE = 768 * 2**20  # a profiler trace, decompressed (campaign_trace.load.MAX_MEMORY / 2)
MAX_ELEMENTS = 2**20  # one stored value or spool line (a point's config: ~220; a spool line of 5,000 rows: ~100,000)
ELEMENT_BYTES = 80  # the most one counted element makes (a dict for "{},": 72 bytes; a key new to a dict: ~75)
STORED_MEMORY_MB = 1024  # all the stored JSON one command parses (CAMPAIGN_JSON_MAX_MEMORY_MB): ~45,000 configs


class BoundError(ValueError):
    """Input beyond a bound (too large, too deep) or not JSON: the message is one line."""


_STRING = re.compile(r'"[^"]*"')  # once escaped quotes are gone, a string is quote to quote
# every bracket as a parenthesis (a mismatched pair nests no deeper than a matched one), all else deleted
_PARENS, _NOT_BRACKET = bytes.maketrans(b"[{]}", b"(())"), bytes(set(range(256)) - set(b"[]{}"))
_STEP = [0] * 256  # how a parenthesis moves the depth
_STEP[ord("(")], _STEP[ord(")")] = 1, -1


def too_deep(text: Union[str, bytes], max_depth: int) -> bool:
    """Whether JSON ``text`` nests ``[``/``{`` deeper than ``max_depth`` (brackets inside
    strings do not count). No recursion, no backtracking, every step in C and linear in
    the text: escapes, strings and every other character are dropped; passes that each
    remove the innermost pairs (one level) run while they shorten what is left by a
    quarter or more; the depth of the rest is summed bracket by bracket. For text that
    is not JSON (unbalanced, mismatched, a stray backslash) the answer bounds the depth
    the parser reaches before it finds the fault."""
    if isinstance(text, (bytes, bytearray, memoryview)):
        text = bytes(text).decode("utf-8", "replace")
    if text.count("[") + text.count("{") <= max_depth:  # the common case
        return False
    # escapes that could hide a string's end: \\ pairs first (a run of backslashes pairs from its start)
    unescaped = text.replace("\\\\", "").replace('\\"', "")
    rest = _STRING.sub("", unescaped).encode("utf-8", "surrogatepass")
    s = rest.translate(_PARENS, _NOT_BRACKET)
    if b"(" * (max_depth + 1) in s:
        return True
    removed = 0
    while s and removed < max_depth:
        shorter = s.replace(b"()", b"")
        if len(shorter) > len(s) * 3 // 4:  # long climbs: the sum below is cheaper than more passes
            break
        s, removed = shorter, removed + 1
    return removed + max(accumulate(map(_STEP.__getitem__, s)), default=0) > max_depth


def elements(text: Union[str, bytes, bytearray]) -> int:
    """An upper bound on the values and keys ``json.loads(text)`` makes: its ``{``, ``[``,
    ``,`` and ``:`` (those inside strings too), counted in C without a copy."""
    marks = ("{", "[", ",", ":") if isinstance(text, str) else (b"{", b"[", b",", b":")
    return sum(text.count(m) for m in marks)  # type: ignore[arg-type]


def memory(text: Union[str, bytes, bytearray], count: Optional[int] = None) -> int:
    """The most bytes ``json.loads(text)`` can take: the text, its strings' payloads (each
    at most the text's size) and ``ELEMENT_BYTES`` a counted element (``elements``)."""
    return 2 * len(text) + ELEMENT_BYTES * (elements(text) if count is None else count)


class Budget:
    """What one command may parse in all (a process runs one command): ``memory``'s
    figure summed over the values charged, up to ``max_bytes`` (None: the environment
    variable ``env``, in MiB, read when first charged; else ``default_mb``)."""

    def __init__(self, env: str, default_mb: int, max_bytes: Optional[int] = None):
        self.env, self.default_mb, self.max_bytes, self.spent = env, default_mb, max_bytes, 0

    def limit(self) -> int:
        if self.max_bytes is None:
            import os

            raw = os.environ.get(self.env, "")
            try:
                self.max_bytes = int(float(raw) * 2**20) if raw.strip() else self.default_mb * 2**20
            except ValueError:  # not a number: the default (a knob, not an input to refuse)
                self.max_bytes = self.default_mb * 2**20
        return self.max_bytes

    def charge(self, need: int, what: str) -> None:
        """Spend ``need`` bytes on ``what``, or ``BoundError`` (nothing spent) past the limit."""
        if self.spent + need > self.limit():
            raise BoundError(f"{what}: parsing it would pass the {self.limit() / 2**20:,.0f} MiB this command "
                             f"parses of stored JSON ({self.env})")
        self.spent += need


STORED = Budget("CAMPAIGN_JSON_MAX_MEMORY_MB", STORED_MEMORY_MB)  # the store's JSON one command parses


def sql_max_chars(budget: Budget = STORED) -> int:
    """The longest stored JSON value (characters; bytes on PostgreSQL) the store's own JSON
    functions may parse: ``memory``'s figure of a text of that many characters, each an
    element, fits ``budget``'s limit (default 1 GiB: 13,094,412), and never more than
    ``MAX_TEXT``. SQLite's parser takes at most ~16 bytes a character, well within it."""
    return min(MAX_TEXT, budget.limit() // (2 + ELEMENT_BYTES))


def check(text: Union[str, bytes], what: str, *, max_bytes: int = MAX_TEXT,
          max_depth: Optional[int] = MAX_DEPTH, max_elements: Optional[int] = MAX_ELEMENTS) -> int:
    """``BoundError`` when ``text`` is larger than ``max_bytes``, holds more than
    ``max_elements`` (``elements``; None: not counted) or nests deeper than
    ``max_depth`` (None: not checked ahead; the parser's own RecursionError still is,
    for a large trace whose readers walk a flat event list and never recurse). Returns
    its elements (0 when not counted)."""
    if len(text) > max_bytes:  # a str's length in characters: each at least one byte
        unit = "characters" if isinstance(text, str) else "bytes"
        raise BoundError(f"{what}: {len(text):,} {unit}, more than the {max_bytes:,} campaign reads")
    count = 0
    if max_elements is not None:  # before the nesting check, which copies the text
        count = elements(text)
        if count > max_elements:
            raise BoundError(f"{what}: {count:,} JSON elements, more than the {max_elements:,} campaign reads")
    if max_depth is not None and too_deep(text, max_depth):
        raise BoundError(f"{what}: JSON nested more than {max_depth} levels deep, deeper than campaign reads")
    return count


def loads(text: Union[str, bytes], what: str = "JSON", *, max_bytes: int = MAX_TEXT,
          max_depth: Optional[int] = MAX_DEPTH, max_elements: Optional[int] = MAX_ELEMENTS,
          budget: Optional[Budget] = None) -> Any:
    """``json.loads(text)`` within bounds; ``BoundError`` (one line, naming ``what``)
    otherwise. ``budget``: charged with ``memory``'s figure before parsing (the
    command's total of such values)."""
    count = check(text, what, max_bytes=max_bytes, max_depth=max_depth, max_elements=max_elements)
    if budget is not None:
        budget.charge(memory(text, count if max_elements is not None else None), what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise BoundError(f"{what}: not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except RecursionError:  # only where max_depth is None: the bound above comes first
        raise BoundError(f"{what}: JSON nested too deep for the parser, deeper than campaign reads") from None
    except MemoryError:
        raise BoundError(f"{what}: too large to parse in the memory left") from None
    except ValueError as exc:  # bytes not in UTF-8/16/32; an integer of more than 4,300 digits
        raise BoundError(f"{what}: not JSON ({str(exc).splitlines()[0][:120]})") from None


class Unreadable(dict):
    """A stored JSON value beyond the bounds, as every engine campaign makes hands it over
    (``stored``): empty and false, so a reader that takes a missing value for ``{}`` or
    ``[]`` goes on; ``reason`` says why, in one line. Read commands name the point and
    go on without the value (campaign.observe.state.unreadable_warnings); harvest leaves such a
    point out; resume refuses it (its stored config no longer matches its signature)."""

    __slots__ = ("reason",)

    def __init__(self, reason: str):
        super().__init__()
        self.reason = reason

    def __repr__(self) -> str:
        return f"Unreadable({self.reason!r})"


def stored(text: Union[str, bytes]) -> Any:
    """SQLAlchemy's ``json_deserializer`` for a store (sql/engine.py): a JSON column's
    value within the default bounds and the command's ``STORED`` budget, or ``Unreadable``
    (one row's bad value never ends a whole query with an exception)."""
    try:
        return loads(text, "stored JSON", budget=STORED)
    except BoundError as exc:
        return Unreadable(str(exc).partition(": ")[2])


def is_unreadable(value: Any) -> bool:
    """Whether a stored JSON value came back ``Unreadable``."""
    return isinstance(value, Unreadable)


def decompress_gzip(raw: bytes, what: str, *, max_bytes: int = MAX_TRACE) -> bytearray:
    """The gzip ``raw`` decompressed, refusing (``BoundError``) once it passes ``max_bytes``
    (a small file that expands to gigabytes never fills memory). Several gzip members
    one after the other are read as one, zero bytes after the last are padding (as
    ``gzip`` reads them). A ``bytearray``: no second copy of up to ``max_bytes``
    (``json.loads`` reads it as it reads bytes)."""
    import zlib

    d = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    out = bytearray()
    data: Optional[bytes] = raw
    while data:
        try:
            chunk = d.decompress(data, max_bytes + 1 - len(out))
        except zlib.error as exc:
            raise BoundError(f"{what}: a damaged gzip file ({exc})") from None
        out += chunk
        if len(out) > max_bytes:
            raise BoundError(f"{what}: expands to more than {max_bytes:,} bytes, more than campaign reads")
        data = d.unconsumed_tail
        if not data and d.eof and d.unused_data.strip(b"\0"):  # concatenated gzip members
            rest = d.unused_data.lstrip(b"\0")
            d = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
            data = rest
    if not d.eof:
        raise BoundError(f"{what}: a damaged gzip file (it ends early)")
    return out
