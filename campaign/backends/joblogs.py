"""What a job's own files say about how it ended, read as text.

A job's outcome reaches the host through the store (the job's writer) and through
these files, never by unpickling: submitit's ``<job>_<task>_result.pkl`` sits at a
path the store names, so loading it would run code for whoever can write the store
or the results folder. A rank that fails prints its traceback to its
``<job>_<task>_log.err`` (submitit re-raises the job's exception); its last line is
the reason. The files' modification time is when the job last did anything.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Optional

from campaign.errors import one_line

TAIL_BYTES = 64 * 1024  # a traceback's end lies in the log's last lines: never read a whole log
_TRACEBACK = "Traceback (most recent call last):"


def _tail(path: Path) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - TAIL_BYTES))
            return fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def last_exception(text: str) -> Optional[str]:
    """The exception line (``ValueError: bad``) of the last traceback in ``text``, or None."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith(_TRACEBACK)]
    if not starts:
        return None
    for line in lines[starts[-1] + 1:]:
        if line.strip() and not line[0].isspace():
            return one_line(line)[:500]
    return None


def log_exception(log_path: Optional[str]) -> Optional[str]:
    """The exception a job's log (``<job>_<task>_log.err``) ends with, or None."""
    return last_exception(_tail(Path(log_path))) if log_path else None


def job_logs(folder: Optional[str], job_id: str) -> list[Path]:
    """The log files submitit's tasks of ``job_id`` wrote in ``folder`` (task order)."""
    if not folder or not os.path.isdir(folder):
        return []
    pattern = re.compile(rf"{re.escape(str(job_id))}_(\d+)_log\.(err|out)")
    found = []
    for name in os.listdir(folder):
        m = pattern.fullmatch(name)
        if m:
            found.append((int(m.group(1)), m.group(2) != "err", Path(folder) / name))
    return [p for _, _, p in sorted(found)]


def last_activity(paths: list[Path]) -> Optional[float]:
    """When the job last wrote any of ``paths`` (its end, once it has ended)."""
    times = []
    for p in paths:
        try:
            times.append(p.stat().st_mtime)
        except OSError:
            continue
    return max(times) if times else None


def failing_task_exception(paths: list[Path]) -> Optional[str]:
    """The first task (rank) whose ``.err`` log ends with an exception: ``rank N: <line>``."""
    for p in paths:
        if not p.name.endswith("_log.err"):
            continue
        line = log_exception(str(p))
        if line:
            return f"rank {p.name.rsplit('_', 2)[-2]}: {line}"
    return None
