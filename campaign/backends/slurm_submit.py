"""sbatch as campaign runs it: retried with back-off where SLURM's failure is transient,
a controller that is full told apart from one that is gone (``ControllerFull``: its points
wait for the next wave), and a submission sbatch got no answer for looked up in the queue
by its comment before it is tried again (never submitted twice)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable, Optional

from campaign.backends import sbatch as sb
from campaign.common.errors import SubmitError
from campaign.common.proc import CommandError, Completed, run

SBATCH_TIMEOUT_S = 60.0
QUERY_TIMEOUT_S = 60.0


class ControllerFull(SubmitError):
    """sbatch met a controller that takes no more jobs now (``sb.FULL``): its points wait
    for the next wave (``line``: what sbatch said)."""

    def __init__(self, line: str):
        self.line = line
        super().__init__(line)


def run_sbatch(
    script: Path,
    *,
    attempts: int = 4,
    backoff_s: float = 1.0,
    runner: Optional[Callable[..., Completed]] = None,
    sleep: Callable[[float], None] = time.sleep,
    find_queued: Optional[Callable[[], Optional[str]]] = None,
) -> str:
    """``sbatch script`` with a scrubbed environment; retries transient failures with
    back-off (1, 2, 4 s); returns sbatch's stdout or raises ``SubmitError`` with
    SLURM's own message.

    An sbatch that gets no answer in time (a saturated controller) may still have
    queued the job: ``find_queued`` (the job id of this very submission, found in the
    queue, or None) is asked after the back-off; a job found is taken as submitted,
    otherwise sbatch is tried again. Without it, no answer is final.

    A controller that answers "full" (``sb.controller_full``: sbatch says so at once, then
    retries by itself for two minutes, so it is stopped at the timeout while still saying
    it) is not a dead one: ``ControllerFull`` at once, never retried (a job found queued
    by ``find_queued`` still counts as submitted)."""
    env = {**sb.scrubbed_environ(os.environ), **sb.SAFE_PATH_ENV}  # the job's Pythons: not from the launch folder
    runner = runner or run
    message = ""
    for i in range(max(1, attempts)):
        try:
            done = runner(["sbatch", str(script)], timeout=SBATCH_TIMEOUT_S, env=env, check=False)
        except CommandError as exc:  # missing, or no answer
            no_answer = exc.detail.startswith("no answer")
            full = sb.controller_full(getattr(exc, "stderr", "")) if no_answer else None
            if not no_answer or (find_queued is None and full is None):
                raise SubmitError(exc.detail) from exc
            sleep(backoff_s * 2**i)
            found = find_queued() if find_queued is not None else None
            if found:
                return f"Submitted batch job {found}\n"
            if full is not None:
                raise ControllerFull(full) from exc
            message = f"sbatch: {exc.detail} (the job is not in the queue)"
            continue
        if done.returncode == 0:
            return done.stdout
        full = sb.controller_full(done.stderr or done.stdout)
        if full is not None:
            raise ControllerFull(full)
        message = sb.sbatch_message(done.stderr or done.stdout, done.returncode)
        if not sb.is_transient(message) or i + 1 >= attempts:
            break
        sleep(backoff_s * 2**i)
    raise SubmitError(message)


def queued_with_comment(comment: str, runner: Callable[..., Completed] = run) -> Optional[str]:
    """The (array) job id of this user's job whose ``--comment`` is ``comment``, or None."""
    import getpass

    try:
        done = runner(["squeue", "-h", "-t", "all", "-u", getpass.getuser(), "-o", "%F|%k"], timeout=QUERY_TIMEOUT_S,
                      check=False)
    except CommandError:
        return None
    for line in done.stdout.splitlines() if done.returncode == 0 else ():
        job, _, text = line.partition("|")
        if text.strip() == comment and job.strip().isdigit():
            return job.strip()
    return None
