"""Reading a chrome trace file as ``torch.profiler``'s ``export_chrome_trace`` writes it.

The format (Chrome's Trace Event Format, as Kineto fills it) is what torch versions
share; the profiler's Python objects are not. A file is a JSON object with a
``traceEvents`` list (a bare list of events is accepted too), plain or gzipped
(``.json.gz``, recognised by its magic bytes, not its name). Timestamps ``ts`` and
durations ``dur`` are microseconds.

A trace may come from anyone, and its bytes do not bound its memory: an 88 KB gzip of
``[{},{},...]`` took 2.3 GB to parse (72 bytes of objects for every 3 bytes of text).
So before ``json`` sees it, what parsing would take is figured from the text
(``parse_memory``: the text, its decoded copy and its strings, and ``ELEMENT_BYTES``
for every ``{``, ``[``, ``,`` and ``:``) and a trace over ``max_memory()`` is refused in
one line. A real trace takes about a third of that figure: the default, 1.5 GiB, reads
a real trace of ~140 MB of JSON (the SwinV2-B fixture: 2 iterations in 31 MB, figured at
341 MB; so ~9 such iterations); ``CAMPAIGN_TRACE_MAX_MEMORY_MB`` raises it for a longer
one. Each file's data is freed before the next is read.
"""

from __future__ import annotations

import gzip
import json
import os
import stat
import zlib
from typing import Any, BinaryIO

# What parsing one trace may take (CAMPAIGN_TRACE_MAX_MEMORY_MB), and the most it may hold
# decompressed: half that (its text and the text's decoded copy). The same figures as
# campaign.common.bounded's: this shared package imports nothing of the host side
# (tests/test_import_graph.py), so it reads within its bounds itself.
MAX_MEMORY_MB = 1536
MAX_TRACE = MAX_MEMORY_MB * 2**20 // 2
ELEMENT_BYTES = 80  # the most one "{", "[", "," or ":" makes ("{}," a dict: 72 bytes; a key new to a dict: ~75)
_CHUNK = 2**20


class TraceError(ValueError):
    """A file that cannot be read as a profiler trace; the message is one line naming it."""


def _read_capped(fh: BinaryIO, name: str, max_bytes: int, what: str) -> bytearray:
    """At most ``max_bytes`` of ``fh``, in chunks (a gzip file that expands to gigabytes,
    or an endless file, never fills memory); TraceError past that."""
    out = bytearray()
    while True:
        chunk = fh.read(min(_CHUNK, max_bytes + 1 - len(out)))
        if not chunk:
            return out
        out += chunk
        if len(out) > max_bytes:
            raise TraceError(f"{name}: {what} more than {max_bytes:,} bytes, more than a trace campaign reads")


def max_memory() -> int:
    """Bytes parsing one trace may take: ``CAMPAIGN_TRACE_MAX_MEMORY_MB`` MiB, else
    ``MAX_MEMORY_MB``; TraceError (one line) when it is set but is no positive number."""
    raw = os.environ.get("CAMPAIGN_TRACE_MAX_MEMORY_MB", "").strip()
    if not raw:
        return MAX_MEMORY_MB * 2**20
    try:
        mb = float(raw)
    except ValueError:
        mb = -1.0
    if not 0 < mb < 2**40:
        raise TraceError(f"CAMPAIGN_TRACE_MAX_MEMORY_MB={raw!r}: expected a positive number of MiB "
                         f"(default {MAX_MEMORY_MB})")
    return int(mb * 2**20)


def parse_memory(raw: bytes | bytearray) -> int:
    """The most bytes decoding and parsing the UTF-8 text ``raw`` can take: the text (the
    bytes until decoded, then a copy of ``width`` bytes a character: 1 when all ASCII,
    else up to 4), the strings' payloads (at most as much again) and ``ELEMENT_BYTES`` a
    ``{``, ``[``, ``,`` or ``:`` (strings' contents counted too: an over-count, in C, no
    copy)."""
    width = 1 if raw.isascii() else 4
    count = sum(raw.count(m) for m in (b"{", b"[", b",", b":"))
    return 2 * width * len(raw) + ELEMENT_BYTES * count


def read_json(path: str | os.PathLike, *, max_bytes: int | None = None,
              max_memory_bytes: int | None = None) -> dict[str, Any]:
    """The trace's top-level object (``traceEvents`` always present, a list). A regular
    file only, plain or gzipped, at most ``max_bytes`` decompressed (default: half of
    ``max_memory_bytes``), whose parse takes at most ``max_memory_bytes`` (default
    ``max_memory()``: ``parse_memory``); its JSON within the parser's own nesting limit
    (readers walk the flat event list, never recurse)."""
    name = os.fspath(path)
    limit = max_memory() if max_memory_bytes is None else max_memory_bytes
    max_bytes = limit // 2 if max_bytes is None else max_bytes
    try:
        fd = os.open(name, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a FIFO does not block the open
    except FileNotFoundError:
        raise TraceError(f"{name}: no such file") from None
    except OSError as exc:
        raise TraceError(f"{name}: cannot read it ({exc.strerror or exc})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # before open(): io refuses a folder with its own error
        os.close(fd)
        raise TraceError(f"{name}: not a regular file; expected a chrome trace (.json or .json.gz)")
    with open(fd, "rb") as fh:
        try:
            gzipped = fh.read(2) == b"\x1f\x8b"
            fh.seek(0)
            if gzipped:  # gzip's reader: members one after another, zero padding, as gzip.decompress reads them
                with gzip.GzipFile(fileobj=fh, mode="rb") as gz:
                    raw = _read_capped(gz, name, max_bytes, "expands to")
            else:
                raw = _read_capped(fh, name, max_bytes, "holds")
        except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
            raise TraceError(f"{name}: a damaged gzip file ({exc})") from None
        except OSError as exc:
            raise TraceError(f"{name}: cannot read it ({exc.strerror or exc})") from None
    need = parse_memory(raw)
    if need > limit:
        raise TraceError(f"{name}: parsing it would take up to {need / 2**20:,.0f} MiB, more than the "
                         f"{limit / 2**20:,.0f} MiB campaign gives a trace (CAMPAIGN_TRACE_MAX_MEMORY_MB); "
                         "a trace of [{},{},...] or the like, or a longer run than that allows")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TraceError(f"{name}: not UTF-8 text ({exc.reason} at byte {exc.start}); expected a chrome trace "
                         "from torch.profiler's export_chrome_trace (.json or .json.gz)") from None
    del raw  # the bytes go before the parse: what it makes is beside the text alone
    try:
        data = json.loads(text)
    except RecursionError:
        raise TraceError(f"{name}: JSON nested too deep for the parser; expected a chrome trace from "
                         f"torch.profiler's export_chrome_trace") from None
    except MemoryError:
        raise TraceError(f"{name}: too large to parse in the memory left ({len(text):,} characters of JSON)") from None
    except ValueError as exc:  # JSONDecodeError, an integer of more than 4,300 digits
        msg = str(exc).splitlines()[0][:120]
        raise TraceError(f"{name}: not JSON ({msg}); expected a chrome trace from "
                         f"torch.profiler's export_chrome_trace (.json or .json.gz)") from None
    del text
    if isinstance(data, list):
        data = {"traceEvents": data}
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise TraceError(f"{name}: not a chrome trace (no traceEvents list); expected a file written by "
                         f"torch.profiler's export_chrome_trace")
    return data
