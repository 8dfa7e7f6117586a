"""The callable submitit pickles for every campaign job. It lives on the host side so
neither the launcher nor the backends import the job side (torch): the job's Python
imports ``trainers.job`` when the callable runs.

A point with ``experiment.checkpoint=true`` gets a ``CheckpointingJobEntry``, a
submitit ``Checkpointable``: on SLURM's signal (preemption, or ``signal_delay_s``
before the time limit; a local job's controller sends the same) the job saves a
checkpoint at the next iteration (trainers/checkpoint.py) and then lets submitit's
own handler requeue it; the next run resumes from the checkpoint."""

from __future__ import annotations

import gc
import os
from typing import Any, Callable

from submitit.helpers import Checkpointable

from campaign.backends.job_spec import JobSpec, check_job_spec
from campaign.common.redact import STORE_URL_ENV, redact


def private_umask() -> None:
    """Files and folders this process creates are its user's alone (0600/0700), or
    stricter where the user's own umask already is."""
    os.umask(os.umask(0o077) | 0o077)


class JobEntry:
    """Run one point's rank: ``trainers.job.run_point(spec)`` in each task.

    The spec (campaign/backends/job_spec.py) is pickled with the store URL redacted; the
    real one arrives in the job's environment (``CAMPAIGN_STORE_URL``, set by the
    launch), used only when it is the same URL with its password. A spec of another
    version than this code reads is refused before the job side is imported.
    """

    def __init__(self, spec: JobSpec):
        self.spec = spec

    def __call__(self) -> Any:
        spec = check_job_spec(self.spec)
        # The job side's start-up (torch and the trainer's stack: ~500,000 objects, none of them
        # garbage) without the collector's passes over it, about a tenth of the imports' CPU;
        # trainers/job.py freezes what start-up made and turns the collector back on before
        # the first iteration.
        gc.disable()
        from trainers.job import run_point

        private_umask()
        real = os.environ.get(STORE_URL_ENV)
        if real and redact(real) == spec.store_url:
            spec = spec.with_store_url(real)
        # local jobs agree on their rendezvous port through the job folder (trainers/dist.py)
        os.environ.setdefault("CAMPAIGN_JOB_FOLDER", spec.job_folder)
        os.environ.setdefault("CAMPAIGN_SPOOL_DIR", spec.spool_dir)  # where the writer spools if the store is out of reach
        return run_point(spec)

    def __repr__(self) -> str:  # shown in submitit's logs
        return (f"JobEntry(point={getattr(self.spec, 'point_id', None)}, "
                f"campaign={getattr(self.spec, 'campaign_id', None)})")


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


def entry_for(spec: JobSpec, plain: Callable[[JobSpec], JobEntry] = JobEntry) -> JobEntry:
    """The entry a point's job runs: checkpointing (requeued on SLURM's signal) with
    ``experiment.checkpoint=true``, else ``plain`` (the executor's own)."""
    if spec.config.get("experiment", {}).get("checkpoint"):
        return CheckpointingJobEntry(spec)
    return plain(spec)
