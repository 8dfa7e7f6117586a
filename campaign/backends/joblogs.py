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

from campaign.common.errors import one_line
from campaign.common.jobfolder import job_log_pattern, log_task
from campaign.common.untrusted import TAIL_BYTES, read_tail, regular_stat

# TAIL_BYTES: a traceback's end lies in the log's last lines; a log is never read whole
_TRACEBACK = "Traceback (most recent call last):"
# A rank whose controller died and whose main thread did not end within the grace its
# watcher gives it is ended by the watcher (trainers/orphan.py), with this last line and
# no traceback: the rank's reason as much as an exception is.
_ORPHAN_ENDED = re.compile(r"the job's controller \(pid \d+\) ended and this rank did not end within [\d.]+ s "
                           r"of noticing; ending it")


def _tail(path: Path) -> str:
    """The log's last ``TAIL_BYTES`` as text; "" for one that is not a regular file
    (a symlink to /dev/zero, a FIFO, a device: campaign.common.untrusted)."""
    return read_tail(path, TAIL_BYTES).text or ""


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
    """The exception a job's log (``<job>_<task>_log.err``) ends with (or the orphan
    watcher's line ending a rank whose controller died), or None."""
    if not log_path:
        return None
    text = _tail(Path(log_path))
    found = last_exception(text)
    if found is None:
        last = next((line for line in reversed(text.splitlines()) if line.strip()), "")
        found = last if _ORPHAN_ENDED.fullmatch(last.strip()) else None
    return found


def job_logs(folder: Optional[str], job_id: str) -> list[Path]:
    """The log files submitit's tasks of ``job_id`` wrote in ``folder`` (task order)."""
    if not folder or not os.path.isdir(folder):
        return []
    pattern = job_log_pattern(job_id)
    found = []
    for name in os.listdir(folder):
        m = pattern.fullmatch(name)
        if m:
            found.append((int(m.group(1)), m.group(2) != "err", Path(folder) / name))
    return [p for _, _, p in sorted(found)]


def last_activity(paths: list[Path]) -> Optional[float]:
    """When the job last wrote any of ``paths`` (its end, once it has ended)."""
    times = [st.st_mtime for st, _ in map(regular_stat, paths) if st is not None]  # links not followed
    return max(times) if times else None


def unread_logs(paths: list[Path]) -> Optional[str]:
    """Why the first of ``paths`` that cannot be read as a log was not read
    (``<name> is not a regular file (a FIFO)``), or None: a status names it."""
    for p in paths:
        _, reason = regular_stat(p)
        if reason:
            return f"{p.name} {reason}, not read"
    return None


def failing_task_exception(paths: list[Path]) -> Optional[str]:
    """The first task (rank) whose ``.err`` log ends with an exception: ``rank N: <line>``."""
    for p in paths:
        task = log_task(p.name)
        if task is None or task[1] != "err":
            continue
        line = log_exception(str(p))
        if line:
            return f"rank {task[0]}: {line}"
    return None
