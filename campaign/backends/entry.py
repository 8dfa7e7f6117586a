"""The callable submitit pickles for every campaign job. It lives on the host side so
neither the launcher nor the backends import the job side (torch): the job's Python
imports ``trainers.job`` when the callable runs.

A point with ``experiment.checkpoint=true`` gets a ``CheckpointingJobEntry``, a
submitit ``Checkpointable``: on SLURM's signal (preemption, or ``signal_delay_s``
before the time limit; a local job's controller sends the same) the job saves a
checkpoint at the next iteration (trainers/checkpoint.py) and then lets submitit's
own handler requeue it; the next run resumes from the checkpoint."""

from __future__ import annotations

import os
from typing import Any, Callable

from submitit.helpers import Checkpointable

from campaign.redact import STORE_URL_ENV, redact


def private_umask() -> None:
    """Files and folders this process creates are its user's alone (0600/0700), or
    stricter where the user's own umask already is."""
    os.umask(os.umask(0o077) | 0o077)


class JobEntry:
    """Run one point's rank: ``trainers.job.run_point(spec)`` in each task.

    The spec is pickled with the store URL redacted; the real one arrives in the job's
    environment (``CAMPAIGN_STORE_URL``, set by the launch), used only when it is the
    same URL with its password.
    """

    def __init__(self, spec: dict[str, Any]):
        self.spec = spec

    def __call__(self) -> Any:
        from trainers.job import run_point

        private_umask()
        spec = dict(self.spec)
        real = os.environ.get(STORE_URL_ENV)
        if real and redact(real) == spec.get("store_url"):
            spec["store_url"] = real
        if spec.get("job_folder"):  # local jobs agree on their rendezvous port through it
            os.environ.setdefault("CAMPAIGN_JOB_FOLDER", spec["job_folder"])
        if spec.get("spool_dir"):  # where the job's writer spools if the store is out of reach
            os.environ.setdefault("CAMPAIGN_SPOOL_DIR", spec["spool_dir"])
        return run_point(spec)

    def __repr__(self) -> str:  # shown in submitit's logs
        return f"JobEntry(point={self.spec.get('point_id')}, campaign={self.spec.get('campaign_id')})"


# How often a checkpointing job may requeue itself at its time limit (submitit's
# max_num_timeout; preemptions are not counted): a 160K-iteration schedule in slices of
# a partition's time limit. A job that is not checkpointing is never requeued.
MAX_TIME_LIMIT_REQUEUES = 100


class CheckpointingJobEntry(Checkpointable, JobEntry):
    """``JobEntry`` of a checkpointing point: submitit requeues it (``checkpoint()``
    resubmits the same entry: the job finds its checkpoint files by its spec)."""

    def __call__(self) -> Any:
        # First, before the seconds of imports and set-up: the preemption signal only
        # raises the checkpointer's flag from now on (trainers/preempt.py, torch-free),
        # instead of submitit ending rank 0 wherever it stands while its peers wait.
        from trainers.preempt import catch

        catch()
        return super().__call__()


def entry_for(spec: dict[str, Any], plain: Callable[[dict[str, Any]], JobEntry] = JobEntry) -> JobEntry:
    """The entry a point's job runs: checkpointing (requeued on SLURM's signal) with
    ``experiment.checkpoint=true``, else ``plain`` (the executor's own)."""
    if spec.get("config", {}).get("experiment", {}).get("checkpoint"):
        return CheckpointingJobEntry(spec)
    return plain(spec)
