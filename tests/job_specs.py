"""Job specs built by hand for tests that hand a backend or a checkpointer a point
without a launch (the launch's own, ``campaign.launch.submit.job_spec``, is tested in
tests/test_job_spec.py)."""

from __future__ import annotations

from typing import Any

from campaign.backends.job_spec import JobSpec


def a_spec(point_id: int = 7, **fields: Any) -> JobSpec:
    """A ``JobSpec`` of point ``point_id`` with harmless values, ``fields`` replacing them."""
    folder = str(fields.pop("job_folder", "/nonexistent/jobs/c1"))
    values: dict[str, Any] = dict(
        campaign_id="c1", point_id=point_id, attempt_base=None, store_url="sqlite:///nonexistent.db",
        busy_timeout_s=30.0, config={"experiment": {}}, plan={}, threads_per_rank=1, tasks_per_node=1,
        container=None, job_folder=folder, spool_dir=f"{folder}/spool", checkpoint_dir=f"{folder}/checkpoints")
    values.update(fields)
    return JobSpec(**values)
