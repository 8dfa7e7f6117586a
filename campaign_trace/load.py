"""Reading a chrome trace file as ``torch.profiler``'s ``export_chrome_trace`` writes it.

The format (Chrome's Trace Event Format, as Kineto fills it) is what torch versions
share; the profiler's Python objects are not. A file is a JSON object with a
``traceEvents`` list (a bare list of events is accepted too), plain or gzipped
(``.json.gz``, recognised by its magic bytes, not its name). Timestamps ``ts`` and
durations ``dur`` are microseconds.
"""

from __future__ import annotations

import gzip
import json
import os
import stat
import zlib
from typing import Any, BinaryIO

# The most a trace may hold, decompressed (a real H100 trace of 8 iterations: ~200 MB).
# The same bound as campaign.common.bounded.MAX_TRACE: this shared package imports nothing of
# the host side (tests/test_import_graph.py), so it reads within its bounds itself.
MAX_TRACE = 2 * 2**30
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


def read_json(path: str | os.PathLike, *, max_bytes: int = MAX_TRACE) -> dict[str, Any]:
    """The trace's top-level object (``traceEvents`` always present, a list). A regular
    file only, plain or gzipped, at most ``max_bytes`` decompressed; its JSON within the
    parser's own nesting limit (readers walk the flat event list, never recurse)."""
    name = os.fspath(path)
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
    try:
        data = json.loads(raw)
    except RecursionError:
        raise TraceError(f"{name}: JSON nested too deep for the parser; expected a chrome trace from "
                         f"torch.profiler's export_chrome_trace") from None
    except MemoryError:
        raise TraceError(f"{name}: too large to parse in the memory left ({len(raw):,} bytes of JSON)") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, an integer of more than 4,300 digits
        msg = str(exc).splitlines()[0][:120]
        raise TraceError(f"{name}: not JSON ({msg}); expected a chrome trace from "
                         f"torch.profiler's export_chrome_trace (.json or .json.gz)") from None
    del raw
    if isinstance(data, list):
        data = {"traceEvents": data}
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise TraceError(f"{name}: not a chrome trace (no traceEvents list); expected a file written by "
                         f"torch.profiler's export_chrome_trace")
    return data
