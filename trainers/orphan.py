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
forever, a daemon thread also looks at the parent every ``POLL_S`` (one getppid) and
raises the same hang-up itself when the controller is gone; the rank raises
``ControllerGone`` once, whichever comes first. The thread is also the portable fallback
where there is no prctl (not Linux) or it is refused. It compares ``getppid()`` with the
controller's pid rather than looking that pid up: a dead parent's pid may be reused by
any process, but a rank's parent once it is orphaned is its reaper (init or a
subreaper), which was alive beside the controller and so never has its pid.

Noticing is not ending: the rank reports its failure (trainers.job), then ends at once
(``end_rank``: no interpreter shutdown, which took seconds with torch's process group
and threads, nor submitit's result pickle, which no controller is left to read). A main
thread that cannot take the hang-up (blocked in native code, a collective waiting for a
peer) is ended by the watcher ``REPORT_GRACE_S`` after it noticed: the rank's report is
then missing and the host names the point failed from its log (campaign/backends/local.py).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import traceback

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
CONTROLLER = b"submitit.local._local"  # the module submitit's local controller runs as
POLL_S = 0.5  # how often the watcher thread looks at the parent (the bound is 2 s to notice)
REPORT_GRACE_S = 2.5  # how long a rank that noticed may take to report before the watcher ends it
ENDED_ITSELF = "; the rank ended itself"  # every ControllerGone reason ends so (status shows it)
EXIT_STATUS = 128 + 1  # as a shell reports a process that SIGHUP ended


class ControllerGone(BaseException):
    """The rank's job controller ended while the rank ran.

    A BaseException, as KeyboardInterrupt is: the hang-up is raised into whatever the
    rank's main thread runs at that moment, and code that must not break a run (the FLOP
    counter of iteration 0, the profiler window) catches ``Exception``; a RuntimeError
    raised there was swallowed once, and the rank ran on without its controller, for
    good (the signal is taken once). trainers.job reports it as the rank's failure."""


def watch_controller() -> bool:
    """On the local executor, raise ``ControllerGone`` in this rank as soon as its
    controller (the parent) dies: the kernel's parent-death signal where Linux grants it,
    and a watcher thread in every case. Returns whether the kernel's signal was granted."""
    if os.environ.get("SUBMITIT_EXECUTOR") != "local" or not hasattr(signal, "SIGHUP"):
        return False
    parent = os.getppid()
    if not _is_controller(parent):  # it died (or was killed) while this rank started
        raise ControllerGone(f"the job's controller ended before this rank started (its parent is now pid {parent})"
                             + ENDED_ITSELF)

    raised = threading.Event()

    def _hangup(signum, frame):
        if raised.is_set():  # the failure is being reported already: let it finish
            return
        raised.set()
        if os.getppid() != parent:
            raise ControllerGone(f"the job's controller (pid {parent}) ended while this rank ran (killed?)"
                                 + ENDED_ITSELF)
        raise ControllerGone("hang-up signal (SIGHUP) while this rank ran" + ENDED_ITSELF)

    signal.signal(signal.SIGHUP, _hangup)
    granted = _parent_death_signal(signal.SIGHUP)
    if os.getppid() != parent:  # it died before the request was in place
        raise ControllerGone(f"the job's controller (pid {parent}) ended before this rank started" + ENDED_ITSELF)
    threading.Thread(target=_watch_parent, args=(parent, raised), name="campaign-controller-watch", daemon=True).start()
    return granted


def end_rank(exc: BaseException) -> None:
    """End this rank now, its ``ControllerGone`` traceback in its log first (the host reads
    a failed job's last exception there). Never returns."""
    try:
        traceback.print_exception(exc, file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(EXIT_STATUS)


def _parent_death_signal(sig: int) -> bool:
    """Ask Linux for ``sig`` when this process's parent dies; False where it cannot."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):  # not Linux: the watcher thread alone
        return False


def _watch_parent(parent: int, raised: threading.Event, poll_s: float = POLL_S,
                  grace_s: float = REPORT_GRACE_S) -> None:
    """Hang this rank up (SIGHUP to itself, handled in its main thread) once its parent is
    no longer ``parent``: the kernel's parent-death signal, made sure of. Then give the
    main thread ``grace_s`` to report and end (``end_rank``) before ending the rank here."""
    while not raised.is_set():
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGHUP)
            break
        time.sleep(poll_s)
    time.sleep(grace_s)
    if os.getppid() != parent:  # still here, orphaned: the main thread never took the hang-up
        print(f"the job's controller (pid {parent}) ended and this rank did not end within {grace_s:g} s "
              f"of noticing; ending it", file=sys.stderr, flush=True)
        os._exit(EXIT_STATUS)


def _is_controller(pid: int) -> bool:
    """Whether ``pid`` runs submitit's local controller (True when /proc cannot say)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return CONTROLLER in fh.read()
    except OSError:
        return not os.path.isdir("/proc")
