"""A local rank whose job controller dies ends itself, and says so.

submitit's local controller starts the ranks, enforces the time limit and holds the
machine's lock; SLURM's step daemon does this on a cluster and kills the step's tasks
when it goes. A local controller killed from outside (``kill -9``) leaves its ranks
running: they would finish unwatched, report a completion for a job that failed,
and share the machine with the next job, which the released lock lets start. Linux
signals a process when its parent dies if asked (``prctl(PR_SET_PDEATHSIG)``): each
rank asks for SIGHUP and turns it into ``ControllerGone``, which it reports as its
failure (trainers.job) before it exits.
"""

from __future__ import annotations

import os
import signal

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


class ControllerGone(RuntimeError):
    """The rank's job controller ended while the rank ran."""


def watch_controller() -> bool:
    """On the local executor (Linux), raise ``ControllerGone`` in this rank as soon as its
    controller (the parent) dies. Returns whether it watches."""
    if os.environ.get("SUBMITIT_EXECUTOR") != "local" or not hasattr(signal, "SIGHUP"):
        return False
    parent = os.getppid()

    def _hangup(signum, frame):
        if os.getppid() != parent:
            raise ControllerGone(f"the job's controller (pid {parent}) ended while this rank ran (killed?)")
        raise ControllerGone("hang-up signal (SIGHUP) while this rank ran")

    signal.signal(signal.SIGHUP, _hangup)
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGHUP), 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):  # not Linux: nothing to ask
        return False
    if os.getppid() != parent:  # it died before the request was in place
        raise ControllerGone(f"the job's controller (pid {parent}) ended before this rank started")
    return True
