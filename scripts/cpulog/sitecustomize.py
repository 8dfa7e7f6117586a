"""Each Python process's own CPU, logged at its exit: where a test run's CPU goes.

On ``PYTHONPATH`` with ``CAMPAIGN_TEST_CPU_LOG=FILE`` set, every Python process started
beneath (pytest, its workers, the campaign commands it forks or starts, every rank of every
job: the suite's ``Workspace`` keeps the suite's own variables, and SLURM jobs inherit
the submitting environment) appends one JSON line to FILE when it exits: its pid, argv, the
test it ran for (``PYTEST_CURRENT_TEST``), the SLURM job, and its own user+system CPU
seconds. ``python3 scripts/cpulog/summary.py FILE`` totals them by test module and kind.
A process killed by a signal logs nothing (a rank its peers' failure ended, a cancelled job).

    CAMPAIGN_TEST_CPU_LOG=/tmp/cpu.log PYTHONPATH=scripts/cpulog \\
        .venv/bin/python -m pytest -q -n 0 tests/test_vit.py
    python3 scripts/cpulog/summary.py /tmp/cpu.log
"""

import atexit
import json
import os
import resource
import sys

_LOG = os.environ.get("CAMPAIGN_TEST_CPU_LOG")


def _write() -> None:
    try:
        r = resource.getrusage(resource.RUSAGE_SELF)
        rec = {"pid": os.getpid(), "argv": sys.argv[:6], "test": os.environ.get("PYTEST_CURRENT_TEST", ""),
               "job": os.environ.get("SLURM_JOB_ID", ""), "cpu": round(r.ru_utime + r.ru_stime, 3)}
        with open(_LOG, "a") as fh:
            fh.write(json.dumps(rec) + "\n")
    except Exception:  # a log that cannot be written never fails the process it measures
        pass


if _LOG:
    atexit.register(_write)
