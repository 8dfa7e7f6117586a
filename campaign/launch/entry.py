"""The callable submitit pickles for every job. It lives on the host side so the
launcher never imports the job side (torch): the job's Python imports
``trainers.job`` when the callable runs."""

from __future__ import annotations

from typing import Any


class JobEntry:
    """Run one point's rank: ``trainers.job.run_point(spec)`` in each task."""

    def __init__(self, spec: dict[str, Any]):
        self.spec = spec

    def __call__(self) -> Any:
        import os

        from trainers.job import run_point

        if self.spec.get("job_folder"):  # local jobs agree on their rendezvous port through it
            os.environ.setdefault("CAMPAIGN_JOB_FOLDER", self.spec["job_folder"])
        if self.spec.get("spool_dir"):  # where the job's writer spools if the store is out of reach
            os.environ.setdefault("CAMPAIGN_SPOOL_DIR", self.spec["spool_dir"])
        return run_point(self.spec)

    def __repr__(self) -> str:  # shown in submitit's logs
        return f"JobEntry(point={self.spec.get('point_id')}, campaign={self.spec.get('campaign_id')})"
