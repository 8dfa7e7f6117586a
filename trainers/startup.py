"""A rank's start-up: from its process's start (the interpreter, imports, the process
group, the model's build, the data) to the start of its first iteration. It is paid by
every run, sampled or full, so harvest counts it in GPU-hours and in what a sampled
run cost (docs/harvest.md)."""

from __future__ import annotations

import os
import time
from typing import Optional


def process_age_s() -> Optional[float]:
    """Seconds since this process started, from the kernel's record of its start
    (``/proc/self/stat``, in clock ticks since boot, 10 ms here) and the boot-time clock;
    None where there is no /proc (not Linux)."""
    try:
        with open("/proc/self/stat", "rb") as fh:
            stat = fh.read().decode("ascii", "replace")
        # the command name (field 2) may hold spaces and parentheses: fields after the last ')'
        fields = stat[stat.rindex(")") + 2:].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: starttime
        return max(time.clock_gettime(time.CLOCK_BOOTTIME) - started, 0.0)
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def startup_s(first_iteration_at: Optional[float]) -> Optional[float]:
    """Seconds from the process's start to ``first_iteration_at`` (a ``perf_counter``
    reading taken when the first iteration began: ``Recorder.t_first``); None when
    either is unknown."""
    age = process_age_s()
    if age is None or first_iteration_at is None:
        return None
    return max(age - (time.perf_counter() - first_iteration_at), 0.0)
