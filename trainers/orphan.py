"""A local rank whose job controller dies ends itself, and says so.

submitit's local controller starts the ranks, enforces the time limit and holds the
machine's lock; SLURM's step daemon does this on a cluster and kills the step's tasks
when it goes. A local controller killed from outside (``kill -9``) leaves its ranks
running: they would finish unwatched, report a completion for a job that failed,
and share the machine with the next job, which the released lock lets start. Linux
signals a process when its parent dies if asked (``prctl(PR_SET_PDEATHSIG)``): each
rank asks for SIGHUP and turns it into ``ControllerGone``, which it reports as its
failure (trainers.job) before it exits.

The request covers only a parent that is still there when it is made: a rank spends
seconds starting (Python, submitit, torch) before it can ask, and a controller killed
meanwhile has already handed the rank to init. So the rank first checks that its parent
is still submitit's controller (``submitit.local._local`` in its command line) and fails
at once when it is not. And since a signal that never comes leaves the rank running
forever, a daemon thread also looks at the parent once a second (one getppid) and
raises the same hang-up itself when the controller is gone; the rank raises
``ControllerGone`` once, whichever comes first.
"""

from __future__ import annotations

import os
import signal
import threading
import time

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
CONTROLLER = b"submitit.local._local"  # the module submitit's local controller runs as
POLL_S = 1.0  # how often the watcher thread looks at the parent


class ControllerGone(BaseException):
    """The rank's job controller ended while the rank ran.

    A BaseException, as KeyboardInterrupt is: the hang-up is raised into whatever the
    rank's main thread runs at that moment, and code that must not break a run (the FLOP
    counter of iteration 0, the profiler window) catches ``Exception``; a RuntimeError
    raised there was swallowed once, and the rank ran on without its controller, for
    good (the signal is taken once). trainers.job reports it as the rank's failure."""


def watch_controller() -> bool:
    """On the local executor (Linux), raise ``ControllerGone`` in this rank as soon as its
    controller (the parent) dies. Returns whether it watches."""
    if os.environ.get("SUBMITIT_EXECUTOR") != "local" or not hasattr(signal, "SIGHUP"):
        return False
    parent = os.getppid()
    if not _is_controller(parent):  # it died (or was killed) while this rank started
        raise ControllerGone(f"the job's controller ended before this rank started (its parent is now pid {parent})")

    raised = threading.Event()

    def _hangup(signum, frame):
        if raised.is_set():  # the failure is being reported already: let it finish
            return
        raised.set()
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
    threading.Thread(target=_watch_parent, args=(parent, raised), name="campaign-controller-watch", daemon=True).start()
    return True


def _watch_parent(parent: int, raised: threading.Event) -> None:
    """Hang this rank up (SIGHUP to itself, handled in its main thread) once its parent is
    no longer ``parent``: the kernel's parent-death signal, made sure of."""
    while not raised.is_set():
        time.sleep(POLL_S)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGHUP)
            return


def _is_controller(pid: int) -> bool:
    """Whether ``pid`` runs submitit's local controller (True when /proc cannot say)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return CONTROLLER in fh.read()
    except OSError:
        return not os.path.isdir("/proc")
