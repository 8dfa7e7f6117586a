"""What the host hands a job: one typed, versioned ``JobSpec`` per point.

Written by the launch (``campaign.launch.submit.job_spec``), pickled by submitit inside
the job's entry (``campaign.backends.entry``), checked by that entry in the job before
anything else runs (``check_job_spec``) and read by the job side (``trainers/job.py``,
``trainers/checkpoint.py``). Every field is written by ``job_spec`` and read in the
job (tests/test_job_spec.py asserts both).

It lives here, beside the entry, because that is the one host-side module the job
already imports: the job unpickles its ``JobEntry`` from ``campaign.backends``, while
``trainers/`` imports nothing of ``campaign`` (tests/test_import_graph.py), so the job
side reads the fields of the spec it is given without importing this class. Standard
library only (no torch, no submitit): importing it costs the job nothing.

A change to the fields (one added, removed, renamed or read differently) bumps
``JOB_SPEC_VERSION``: a job whose code reads another version than the host wrote
refuses with one line saying so, instead of failing later on a missing attribute.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Optional

from campaign.common.errors import CampaignError

JOB_SPEC_VERSION = 1  # the layout below; bumped with any change to its fields


class JobSpecMismatch(CampaignError):
    """The job was handed a spec its code cannot read (another version, or not a spec)."""


@dataclass(frozen=True)
class JobSpec:
    """One point's job, as every rank of it reads it. The store URL is redacted: the real
    one reaches the job in its environment (``CAMPAIGN_STORE_URL``) and the entry puts it
    back (``with_store_url``). ``config`` and ``plan`` stay plain dicts (the resolved Hydra
    config; the schedule ``campaign.launch.plan.job_plan`` derives from it)."""

    campaign_id: str  # the campaign the point belongs to (named in submitit's log of the entry)
    point_id: int  # the point's id in the store: every row the job writes is keyed by it
    attempt_base: Optional[int]  # the attempt this submission opened (its requeues number on from it)
    store_url: str  # the results store, its password redacted
    busy_timeout_s: float  # how long the job's writer waits on a locked SQLite store (store.busy_timeout_s)
    config: dict[str, Any]  # the point's resolved config, secrets redacted
    plan: dict[str, Any]  # the point's schedule: warm-up, iterations, profile, sampling (job_plan)
    threads_per_rank: Optional[int]  # cores the scheduler grants each rank (cpus_per_task)
    tasks_per_node: int  # ranks on one node: they share its cores
    container: Optional[dict[str, Any]]  # the container section and its image's provenance; None: no container
    job_folder: str  # <results>/jobs/<campaign id>: local ranks agree on their rendezvous port through it
    spool_dir: str  # where the job's writer spools what the store did not take
    checkpoint_dir: str  # where the ranks keep their checkpoints (experiment.checkpoint=true)
    version: int = JOB_SPEC_VERSION  # the layout the host wrote; the job refuses another

    def with_store_url(self, url: str) -> "JobSpec":
        """The same spec with ``url`` as its store URL (the real one, in the job)."""
        return dataclasses.replace(self, store_url=url)


def check_job_spec(spec: object) -> JobSpec:
    """``spec`` if this code reads it; ``JobSpecMismatch`` with a one-line reason for a
    spec of another version or for anything else (a dict from a campaign before the
    typed spec). Called by the job's entry before the job side is imported."""
    if not isinstance(spec, JobSpec):
        raise JobSpecMismatch(f"the job was handed a {type(spec).__name__}, not a JobSpec (version "
                              f"{JOB_SPEC_VERSION}): it was submitted by other campaign code than the job runs; "
                              f"install one campaign version for the launch and the job (or rebuild the image), "
                              f"then campaign resume")
    # From the pickled state, not the attribute: a pickle without the field would read the
    # class's default, this code's own version
    version = vars(spec).get("version")
    if version != JOB_SPEC_VERSION:
        raise JobSpecMismatch(f"job spec version {version} but this job's code reads version {JOB_SPEC_VERSION}: "
                              f"it was submitted by other campaign code than the job runs; install one campaign "
                              f"version for the launch and the job (or rebuild the image), then campaign resume")
    return spec
