"""The local executor: submitit's LocalExecutor, one controller process per point
that starts N rank processes on this machine and outlives the launcher."""

from __future__ import annotations

import os
import pickle
import shlex
import shutil
import signal
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence

from campaign.backends.base import Backend, Observed, Submitted
from campaign.errors import one_line


@contextmanager
def detached_stdio(log_path: Path) -> Iterator[None]:
    """Children started inside get /dev/null as stdin and ``log_path`` as stdout/stderr.

    submitit's local controller inherits the launcher's standard streams; a pipe
    reading the launcher (``launch | tee``, a test's ``capture_output``) would then
    wait for the jobs to end instead of the launcher.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(fd) for fd in (0, 1, 2)]
    try:
        with open(os.devnull, "rb") as null, open(log_path, "ab") as log:
            os.dup2(null.fileno(), 0)
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
            yield
    finally:
        for fd, copy in zip((0, 1, 2), saved):
            os.dup2(copy, fd)
            os.close(copy)


def exclusive_setup(jobs_dir: Path) -> list[str]:
    """Shell lines that make a local job wait for the machine-wide job lock.

    submitit runs them before the job's controller in one shell: fd 9 holds an
    exclusive flock that the controller inherits, so the lock is released only
    when the controller (and with it every rank) has ended. Jobs of all campaigns
    under the same results folder take turns; while waiting they show as pending.
    """
    if shutil.which("flock") is None:
        return []  # no util-linux: jobs run concurrently (timings may interfere)
    lock = Path(jobs_dir) / ".local-exclusive.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    return [f"exec 9>>{shlex.quote(str(lock))}", "flock 9"]


def _controller_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmd = fh.read().replace(b"\0", b" ")
    except OSError:
        return False
    if b"submitit.local._local" not in cmd:
        return False  # the pid was reused by something else
    try:  # a zombie (finished, not yet reaped) counts as ended
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().split(b")")[-1].split()[0] != b"Z"
    except OSError:
        return False


def read_result(folder: Path, job_id: str) -> Optional[tuple[str, Any]]:
    """submitit's result pickle of task 0: ("success", value) or ("error", traceback)."""
    path = Path(folder) / f"{job_id}_0_result.pkl"
    if not path.exists():
        return None
    try:
        with path.open("rb") as fh:
            return pickle.load(fh)
    except Exception as exc:  # a half-written or foreign pickle
        return ("error", f"unreadable result {path}: {exc}")


def failure_reason(traceback_text: str) -> str:
    """The last line of a traceback: the exception and its message."""
    lines = [ln for ln in str(traceback_text).strip().splitlines() if ln.strip()]
    return one_line(lines[-1]) if lines else "failed"


class LocalBackend(Backend):
    name = "local"

    def submit(self, items: Sequence[tuple[Any, dict]], folder: Path, python: Optional[str]) -> list[Submitted]:
        """One submitit local job per point; a point that cannot start (the folder is not
        writable, ...) comes back refused with the reason, the others still go."""
        import submitit

        from campaign.backends.entry import JobEntry

        out = []
        for plan, spec in items:
            res = plan.resources
            spec = dict(spec, job_folder=str(folder))
            try:
                ex = submitit.LocalExecutor(folder=folder, python=python)
                ex.update_parameters(
                    tasks_per_node=res.tasks_per_node,
                    timeout_min=res.timeout_min,
                    gpus_per_node=res.gpus_per_node,  # CUDA_VISIBLE_DEVICES=0..n-1 (none: CPU ranks)
                    stderr_to_stdout=False,
                    setup=exclusive_setup(Path(folder).parent) if res.exclusive else (),
                )
                with detached_stdio(Path(folder) / "controllers.log"):
                    job = ex.submit(JobEntry(spec))
            except Exception as exc:  # e.g. the folder is not writable, or is a file
                out.append(Submitted(spec["point_id"], None, error=one_line(f"{type(exc).__name__}: {exc}")))
                continue
            out.append(
                Submitted(
                    spec["point_id"],
                    str(job.job_id),
                    job_folder=str(folder),
                    log_path=str(job.paths.stderr),
                    job=job,
                )
            )
        return out

    def observe(self, points: Sequence[dict]) -> dict[int, Observed]:
        seen: dict[int, Observed] = {}
        for p in points:
            if not p.get("job_id") or not p.get("job_folder"):
                continue
            pid = int(p["job_id"])
            if _controller_alive(pid):
                seen[p["id"]] = Observed("running" if p["state"] == "running" else "pending")
                continue
            res = read_result(Path(p["job_folder"]), p["job_id"])
            if res is None:
                seen[p["id"]] = Observed("failed", "job process ended without a result (killed?); see its log")
            elif res[0] == "success":
                seen[p["id"]] = Observed("completed")
            else:
                seen[p["id"]] = Observed("failed", failure_reason(res[1]))
        return seen

    def cancel(self, points: Sequence[dict]) -> list[int]:
        done = []
        for p in points:
            if not p.get("job_id"):
                continue
            pid = int(p["job_id"])
            if _controller_alive(pid):
                stop_job(pid)
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
