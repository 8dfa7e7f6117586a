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
import zlib
from typing import Any


class TraceError(ValueError):
    """A file that cannot be read as a profiler trace; the message is one line naming it."""


def read_json(path: str | os.PathLike) -> dict[str, Any]:
    """The trace's top-level object (``traceEvents`` always present, a list)."""
    name = os.fspath(path)
    try:
        with open(name, "rb") as fh:
            raw = fh.read()
    except FileNotFoundError:
        raise TraceError(f"{name}: no such file") from None
    except OSError as exc:
        raise TraceError(f"{name}: cannot read it ({exc.strerror or exc})") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise TraceError(f"{name}: a damaged gzip file ({exc})") from None
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        msg = str(exc).splitlines()[0][:120]
        raise TraceError(f"{name}: not JSON ({msg}); expected a chrome trace from "
                         f"torch.profiler's export_chrome_trace (.json or .json.gz)") from None
    if isinstance(data, list):
        data = {"traceEvents": data}
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise TraceError(f"{name}: not a chrome trace (no traceEvents list); expected a file written by "
                         f"torch.profiler's export_chrome_trace")
    return data
