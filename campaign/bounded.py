"""JSON from places others can write, parsed within bounds.

A shared store, a spool file in a shared results folder or a profiler trace handed
over by a colleague is data that anyone with write access shaped: a value nested ten
thousand levels deep makes Python's ``json`` (and every walk over its result) raise
``RecursionError``; a line of gigabytes, or a small gzip that expands to gigabytes,
exhausts memory. Every such input is parsed here, with a size limit and a nesting
limit checked *before* the parser sees the text, and any failure becomes one
``BoundError`` line naming what was read. Stdlib only (the job side and
``campaign_trace`` use it too).
"""

from __future__ import annotations

import json
import re
from typing import Any, Optional, Union

MAX_DEPTH = 64  # no config, spool operation or trace campaign writes nests deeper than ~12
MAX_TEXT = 64 * 2**20  # one stored config, one spool line: far below this
MAX_TRACE = 2 * 2**30  # a profiler trace, decompressed (a real H100 trace of 8 iterations: ~200 MB)


class BoundError(ValueError):
    """Input beyond a bound (too large, too deep) or not JSON: the message is one line."""


_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def too_deep(text: Union[str, bytes], max_depth: int) -> bool:
    """Whether JSON ``text`` nests ``[``/``{`` deeper than ``max_depth`` (brackets inside
    strings do not count). No recursion, and every pass runs in C: strings and other
    characters are dropped, then each pass removes the innermost empty pairs."""
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", "replace")
    if text.count("[") + text.count("{") <= max_depth:  # the common case
        return False
    s = _NOT_BRACKET.sub("", _STRING.sub("", text))
    for _ in range(max_depth):
        if not s:
            return False
        shorter = s.replace("[]", "").replace("{}", "")
        if shorter == s:  # unbalanced: not JSON, which the parser says
            return False
        s = shorter
    return bool(s) and s.replace("[]", "").replace("{}", "") != s


def check(text: Union[str, bytes], what: str, *, max_bytes: int = MAX_TEXT,
          max_depth: Optional[int] = MAX_DEPTH) -> None:
    """``BoundError`` when ``text`` is larger than ``max_bytes`` or nests deeper than
    ``max_depth`` (None: not checked ahead; the parser's own RecursionError still is,
    for a large trace whose readers walk a flat event list and never recurse)."""
    if len(text) > max_bytes:
        raise BoundError(f"{what}: {len(text):,} bytes, more than the {max_bytes:,} campaign reads")
    if max_depth is not None and too_deep(text, max_depth):
        raise BoundError(f"{what}: JSON nested more than {max_depth} levels deep, deeper than campaign reads")


def loads(text: Union[str, bytes], what: str = "JSON", *, max_bytes: int = MAX_TEXT,
          max_depth: Optional[int] = MAX_DEPTH) -> Any:
    """``json.loads(text)`` within bounds; ``BoundError`` (one line, naming ``what``) otherwise."""
    check(text, what, max_bytes=max_bytes, max_depth=max_depth)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise BoundError(f"{what}: not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except (UnicodeDecodeError, RecursionError, MemoryError) as exc:  # (bounds above make these unlikely)
        raise BoundError(f"{what}: cannot be read ({'nested too deep' if isinstance(exc, RecursionError) else type(exc).__name__})") from None


def decompress_gzip(raw: bytes, what: str, *, max_bytes: int = MAX_TRACE) -> bytes:
    """The gzip ``raw`` decompressed, refusing (``BoundError``) once it passes ``max_bytes``
    (a small file that expands to gigabytes never fills memory)."""
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
        if not data and d.eof and d.unused_data:  # concatenated gzip members
            rest = d.unused_data
            d = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
            data = rest
    if not d.eof:
        raise BoundError(f"{what}: a damaged gzip file (it ends early)")
    return bytes(out)
