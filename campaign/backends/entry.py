"""The callable submitit pickles for every campaign job. It lives on the host side so
neither the launcher nor the backends import the job side (torch): the job's Python
imports ``trainers.job`` when the callable runs."""

from __future__ import annotations

import os
from typing import Any

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
