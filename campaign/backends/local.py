"""The local executor: submitit's LocalExecutor, one controller process per point
that starts N rank processes on this machine and outlives the launcher."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import stat
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence

from campaign.backends.base import Backend, JobGroup, Observed, Submitted, point_indices
from campaign.backends.joblogs import failing_task_exception, job_logs, last_activity, unread_logs
from campaign.common.errors import one_line
from campaign.common.jobfolder import CONTROLLERS_LOG  # the job folder's controllers' own output
from campaign.common.untrusted import open_append, regular_stat
from campaign.common.ids import job_id_problem


@contextmanager
def safe_path_env() -> Iterator[None]:
    """``PYTHONSAFEPATH=1`` (``SAFE_PATH_ENV``) in this process's environment while a job
    starts: its controller (``python -m submitit.local._local``, a command submitit makes)
    and every Python under it inherit it, so none imports from the launch's folder."""
    from campaign.backends.sbatch import SAFE_PATH_ENV
    from campaign.common.proc import variables_in_environment

    with variables_in_environment(SAFE_PATH_ENV):
        yield


@contextmanager
def detached_stdio(log_path: Path) -> Iterator[None]:
    """Children started inside get /dev/null as stdin and ``log_path`` as stdout/stderr.

    submitit's local controller inherits the launcher's standard streams; a pipe
    reading the launcher (``launch | tee``, a test's ``capture_output``) would then
    wait for the jobs to end instead of the launcher.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    log = open_append(log_path)  # never through a symlink, nor into a FIFO (campaign.common.untrusted)
    saved = [os.dup(fd) for fd in (0, 1, 2)]
    try:
        with os.fdopen(log, "ab") as log_file, open(os.devnull, "rb") as null:
            os.dup2(null.fileno(), 0)
            os.dup2(log_file.fileno(), 1)
            os.dup2(log_file.fileno(), 2)
            yield
    finally:
        for fd, copy in zip((0, 1, 2), saved):
            os.dup2(copy, fd)
            os.close(copy)


LOCK_DIR_ENV = "CAMPAIGN_LOCK_DIR"  # where the machine's job lock lives (tests give each workspace its own)
LOCK_FILE = "local-exclusive.lock"


def lock_folder() -> Path:
    """Where the machine-wide lock lives (``lock_path``), made or not."""
    base = os.environ.get(LOCK_DIR_ENV)
    if base:
        return Path(base)
    if os.environ.get("XDG_RUNTIME_DIR"):
        return Path(os.environ["XDG_RUNTIME_DIR"]) / "campaign"
    return Path("/tmp") / f"campaign-{os.getuid()}"


def lock_path() -> Path:
    """The machine-wide lock file of this user's local jobs: ``$CAMPAIGN_LOCK_DIR``, else
    ``$XDG_RUNTIME_DIR/campaign``, else ``/tmp/campaign-<uid>``; the folder is made 0700
    and the file 0600. A folder that is not this user's own private one (another user's,
    a symlink, group- or world-writable) is refused: whoever could write it could hold
    or swap the lock. OSError (with the fix) otherwise."""
    folder = lock_folder()
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = os.lstat(folder)

    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
        raise OSError(f"the local job lock folder {folder} is not a private folder of this user "
                      f"(owner uid {st.st_uid}, mode {stat.filemode(st.st_mode)}); remove it, or set {LOCK_DIR_ENV}")
    lock = folder / LOCK_FILE
    os.close(os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0), 0o600))
    return lock


def exclusive_setup() -> list[str]:
    """Shell lines that make a local job wait for the machine-wide job lock (``lock_path``).

    submitit runs them before the job's controller in one shell: fd 9 holds an
    exclusive flock that the controller inherits, so the lock is released only
    when the controller (and with it every rank) has ended. The jobs of every
    campaign of this user on this machine take turns, whatever their results folder,
    so they never share cores and skew each other's timings; while waiting they show
    as pending.
    """
    if shutil.which("flock") is None:
        return []  # no util-linux: jobs run concurrently (timings may interfere)
    return lock_commands(lock_path())


def lock_commands(lock: Path) -> list[str]:
    """The shell lines that hold ``lock`` for the rest of the shell's life (fd 9)."""
    return [f"exec 9>>{shlex.quote(str(lock))}", "flock 9"]


def lock_lines() -> list[str]:
    """``exclusive_setup``'s lines, without making the lock's folder (a dry run makes
    nothing; a test checks that the two agree)."""
    return lock_commands(lock_folder() / LOCK_FILE)


CONTROLLER = b"submitit.local._local"  # submitit's job controller (and the shell that waits for the lock)
TASK = b"submitit.core._submit"  # one rank


@dataclass
class _Proc:
    pid: int
    ppid: int
    cmdline: bytes


class ProcessTable:
    """This machine's submitit processes, from one walk of /proc: job controllers (the
    shell of an exclusive job and its Python controller) and ranks by their job id
    (``SUBMITIT_LOCAL_JOB_ID``, the controller's id, which outlives the controller)."""

    def __init__(self) -> None:
        self.controllers: dict[int, _Proc] = {}
        self.ranks: dict[str, list[_Proc]] = {}
        for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
            if entry.isdigit():
                self._add(int(entry))

    def _add(self, pid: int) -> None:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ")
            if CONTROLLER not in cmd and TASK not in cmd:
                return
            with open(f"/proc/{pid}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
            if fields[0] == b"Z":  # a zombie (ended, not yet reaped) counts as ended
                return
            proc = _Proc(pid, int(fields[1]), cmd)
            if CONTROLLER in cmd:
                self.controllers[pid] = proc
                return
            with open(f"/proc/{pid}/environ", "rb") as fh:
                env = dict(kv.split(b"=", 1) for kv in fh.read().split(b"\0") if b"=" in kv)
        except (OSError, ValueError, IndexError):  # gone meanwhile, or not ours to read
            return
        job = env.get(b"SUBMITIT_LOCAL_JOB_ID")
        if job is not None:
            self.ranks.setdefault(job.decode(errors="replace"), []).append(proc)

    def job(self, job_id: str, folder: Optional[str], *, strict: bool = False) -> tuple[list[int], list[int]]:
        """(live controller pids, live rank pids) of the local job ``job_id``.

        The job's own pid counts only if it still runs a controller of that job's
        folder (a pid reused by something else, e.g. after a reboot, does not); a rank's
        parent counts when it is a controller (the shell that started it may be gone).
        ``strict`` (what may be signalled): only processes whose command line names
        ``folder``'s full path; none without a folder."""
        if strict and not folder:
            return [], []
        ranks = self.ranks.get(str(job_id), [])
        found = []
        own = self.controllers.get(int(job_id)) if str(job_id).isdigit() else None
        mark = os.fsencode(os.path.normpath(folder) if strict else os.path.basename(os.path.normpath(folder or "")))
        if strict:
            ranks = [r for r in ranks if mark in r.cmdline]
        if own is not None and (not folder or mark in own.cmdline):
            found.append(own.pid)
        for rank in ranks:  # every rank's parent once: stop_job signals each pid found
            if rank.ppid in self.controllers and rank.ppid not in found:
                found.append(rank.ppid)
        return found, [r.pid for r in ranks]


JOB_ID = re.compile(r"[1-9]\d{0,9}")  # what this backend stores: the job controller's pid (submitit's job id)


def bad_job_id(job_id: object) -> Optional[str]:
    """Why a stored job id is never looked up or signalled (campaign.common.ids), or None when it is one."""
    return job_id_problem(str(job_id), JOB_ID, "local", "a process id")


SUBMITIT_LOCAL_SIGNAL_DELAY_S = 30  # submitit's local controller warns (USR2) this long before the time limit
START_GRACE_S = 30.0  # a local job with neither process nor log this soon after submission is starting, not lost


def _controllers_hint(folder: Optional[str]) -> str:
    """Where to look when a job left no log: its folder's controllers' output, if any."""
    path = Path(folder) / CONTROLLERS_LOG if folder else None
    st = regular_stat(path)[0] if path is not None else None  # a link or FIFO there is nothing to see
    return f"; see {path}" if st is not None and st.st_size > 0 else ""


def observe_job(p: dict, table: ProcessTable) -> Observed:
    """What a local job's processes and files say of it (never its result pickle)."""
    controllers, ranks = table.job(p["job_id"], p.get("job_folder"))
    if controllers:
        if ranks or p["state"] == "running":
            return Observed("running")
        return Observed("pending", "waiting for this machine (local jobs run one at a time)")
    logs = job_logs(p.get("job_folder"), p["job_id"])
    ended = last_activity(logs)
    if ranks:
        return Observed("failed", f"job controller {p['job_id']} ended while rank(s) ran (killed?); its ranks "
                                  f"end themselves", ended_at=ended)
    if not logs:
        submitted = p.get("submitted_at")
        if submitted is not None and time.time() - float(submitted) < START_GRACE_S:
            # its shell and controller start, its tasks' logs come a moment later: a
            # missed glimpse in between is not a job that vanished
            return Observed("pending", f"starting: no process or log of local job {p['job_id']} seen yet")
        where = p.get("job_folder") or "its job folder"
        return Observed("lost", f"nothing answers: no process of local job {p['job_id']} and no log in {where}"
                                + _controllers_hint(p.get("job_folder")))
    found = failing_task_exception(logs)
    unread = None if found else unread_logs(logs)
    reason = f"{found} (the job ended without reporting it)" if found else \
        "job ended without reporting results (killed?); " + (f"its log {unread}" if unread else "see its log")
    return Observed("failed", reason, ended_at=ended)


class LocalBackend(Backend):
    name = "local"
    runs_here = True
    queue_wait = False  # a pending local job waits only for this user's other local jobs
    silent_stop_lead_s = SUBMITIT_LOCAL_SIGNAL_DELAY_S

    def rank_device(self, platform: Mapping[str, Any]) -> str:
        """A GPU for ``device: cuda`` (``local_gpu``); otherwise a CPU process stands in for
        one (``local``)."""
        return "cuda" if platform.get("device") == "cuda" else "cpu"

    def takes_turns(self, platform: Mapping[str, Any]) -> bool:
        """An exclusive platform's jobs wait for the machine-wide lock (``exclusive_setup``)."""
        return bool(platform.get("exclusive"))

    def dry_run_script(self, group: JobGroup, folder: Path, python: Optional[str], env_note: str) -> list[str]:
        """The command each rank runs, after the lines that wait for this machine (an
        exclusive platform's, ``lock_lines``)."""
        from campaign.backends.sbatch import submit_command

        res = group.points[0].resources
        setup = lock_lines() if res.exclusive else []
        return [f"== {group.label}: local jobs of points {point_indices(group)} (one job per point"
                + (", one at a time on this machine" if res.exclusive else "") + ") ==",
                *(["# before the job starts, it waits for this machine:", *setup] if setup else []),
                f"# then {res.tasks} process(es), one per rank, each running:",
                env_note + submit_command(folder, python), ""]

    def submit_callables(self, calls: Sequence[Callable[[], Any]], folder: Path, resources: Any,
                         name: str) -> list[tuple[Any, Optional[BaseException]]]:
        """One local job per call (a Hydra app's points), its controller's output in the
        folder's ``controllers.log``."""
        import submitit

        from campaign.backends.sbatch import host_python

        out: list[tuple[Any, Optional[BaseException]]] = []
        for call in calls:
            try:
                ex = submitit.LocalExecutor(folder=folder, python=host_python())
                ex.update_parameters(tasks_per_node=resources.tasks_per_node, timeout_min=resources.timeout_min,
                                     gpus_per_node=resources.gpus_per_node, stderr_to_stdout=False)
                with detached_stdio(Path(folder) / CONTROLLERS_LOG), safe_path_env():
                    out.append((ex.submit(call), None))
            except Exception as exc:
                out.append((None, exc))
        return out

    def submit(self, items: Sequence[tuple[Any, dict]], folder: Path, python: Optional[str]) -> list[Submitted]:
        """One submitit local job per point; a point that cannot start (the folder is not
        writable, ...) comes back refused with the reason, the others still go."""
        import submitit

        from campaign.backends.entry import MAX_TIME_LIMIT_REQUEUES, entry_for
        from campaign.backends.sbatch import job_interpreter

        out = []
        for plan, spec in items:
            res = plan.resources
            try:
                ex = submitit.LocalExecutor(folder=folder, python=job_interpreter(python),  # -P (SAFE_PATH)
                                            **({"max_num_timeout": MAX_TIME_LIMIT_REQUEUES} if res.checkpoint else {}))
                ex.update_parameters(
                    tasks_per_node=res.tasks_per_node,
                    timeout_min=res.timeout_min,
                    gpus_per_node=res.gpus_per_node,  # CUDA_VISIBLE_DEVICES=0..n-1 (none: CPU ranks)
                    stderr_to_stdout=False,
                    setup=exclusive_setup() if res.exclusive else (),
                )
                with detached_stdio(Path(folder) / CONTROLLERS_LOG), safe_path_env():
                    job = ex.submit(entry_for(spec))
            except Exception as exc:  # e.g. the folder is not writable, or is a file
                out.append(Submitted(spec.point_id, None, error=one_line(f"{type(exc).__name__}: {exc}")))
                continue
            out.append(
                Submitted(
                    spec.point_id,
                    str(job.job_id),
                    job_folder=str(folder),
                    log_path=str(job.paths.stderr),
                    job=job,
                )
            )
        return out

    def observe(self, points: Sequence[dict]) -> dict[int, Observed]:
        """One walk of /proc for every point, then each job's log files; a point whose stored
        job id is not a local one (``JOB_ID``) is lost, its id never looked up."""
        table = ProcessTable()
        return {p["id"]: Observed("lost", problem) if (problem := bad_job_id(p["job_id"])) else observe_job(p, table)
                for p in points if p.get("job_id")}

    def cancel(self, points: Sequence[dict]) -> list[int]:
        """Stop every process of the points' jobs: controllers as ``stop_job``, and ranks
        whose controller is gone (orphans, nothing else would end them) by SIGKILL."""
        table = ProcessTable()
        done = []
        for p in points:
            if not p.get("job_id") or bad_job_id(p["job_id"]) or not p.get("job_folder"):
                continue  # (campaign.observe.cancel ties a job to its campaign's folder first)
            controllers, ranks = table.job(p["job_id"], p.get("job_folder"), strict=True)
            # The job's own pid first: stop_job reaches its children; a controller signalled
            # twice could be interrupted while it stops its ranks.
            for pid in controllers[:1] if controllers and str(controllers[0]) == str(p["job_id"]) else controllers:
                stop_job(pid)
            if not controllers:
                for pid in ranks:
                    _signal(pid, signal.SIGKILL)
            done.append(p["id"])
        return done


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                ppid = int(fh.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid:
            out.append(int(entry))
    return out


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read()
    except OSError:
        return b""


def stop_job(pid: int) -> None:
    """Stop a local job: the submitit controller gets SIGINT (it stops its tasks, which
    ignore SIGTERM); an exclusive job's wrapper shell and a `flock` still waiting for the
    machine are terminated, so the job neither runs later nor keeps the lock."""
    targets = [pid] + _children(pid)
    controllers = [t for t in targets if b"submitit.local._local" in _cmdline(t) and b"flock" not in _cmdline(t)]
    for t in controllers:
        _signal(t, signal.SIGINT)
    for t in targets:
        if t not in controllers:
            _signal(t, signal.SIGTERM)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
