"""Register validated points in the store and hand them to their executors."""

from __future__ import annotations

import getpass
import os
import secrets
import shlex
import socket
import sys
import time
from pathlib import Path
from typing import Any, Optional, Sequence

from campaign.backends import Submitted, get_backend
from campaign.launch.plan import PointPlan, job_plan
from campaign.store import open_store


def new_campaign_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


def job_spec(p: PointPlan, point_id: int, campaign_id: str, store_url: str, folder: Path) -> dict[str, Any]:
    """Everything a rank needs; pickled into the job by submitit."""
    return {
        "spool_dir": str(folder / "spool"),
        "campaign_id": campaign_id,
        "point_id": point_id,
        "store_url": store_url,
        "busy_timeout_s": float(p.config["store"].get("busy_timeout_s", 30.0)),
        "config": p.config,
        "plan": job_plan(p),
        "threads_per_rank": p.resources["cpus_per_task"],
        "tasks_per_node": p.resources["tasks_per_node"],
        "container": None if p.config["container"]["runtime"] == "none" else dict(p.config["container"]),
    }


def _image_provenance(points: Sequence[PointPlan]) -> Optional[dict[str, Any]]:
    """Image path, sha256, runtime and its version: measured once per campaign."""
    runtimes = {p.config["container"]["runtime"] for p in points}
    if runtimes <= {"none"}:
        return None
    from omegaconf import OmegaConf

    from campaign.container import image_provenance

    return image_provenance(OmegaConf.create(points[0].config["container"]))


def absolute_store_url(url: str) -> str:
    """Make a relative sqlite path absolute, so jobs started elsewhere find the store."""
    prefix = "sqlite:///"
    if url.startswith(prefix) and not url.startswith(prefix + "/") and url[len(prefix):] not in ("", ":memory:"):
        return prefix + os.path.abspath(url[len(prefix):])
    return url


def register_and_submit(
    points: Sequence[PointPlan],
    *,
    store_url: str,
    results_dir: str,
    name: Optional[str],
    overrides: Sequence[str],
    python: Optional[str] = None,
) -> tuple[str, list[Submitted]]:
    """Register the campaign and its points, then submit every point.

    Returns the campaign id and one ``Submitted`` per point. A point its scheduler
    refuses is marked ``rejected`` with the scheduler's message; the rest still go.
    """
    store_url = absolute_store_url(store_url)
    campaign_id = new_campaign_id()
    results = Path(results_dir).resolve()
    folder = results / "jobs" / campaign_id
    with open_store(store_url, create=True) as store:
        ids = store.register(
            {
                "id": campaign_id,
                "name": name,
                "created_at": time.time(),
                "command": " ".join(shlex.quote(a) for a in [Path(sys.argv[0]).name, *sys.argv[1:]]),
                "overrides": list(overrides),
                "results_dir": str(results),
                "host": socket.gethostname(),
                "user": getpass.getuser(),
            },
            [p.store_row() for p in points],
        )
        image = _image_provenance(points)
        by_executor: dict[str, list[tuple[PointPlan, dict]]] = {}
        for p, pid in zip(points, ids):
            spec = job_spec(p, pid, campaign_id, store_url, folder)
            if image and spec["container"] is not None:
                spec["container"].update(image)  # recorded in each attempt's provenance
            by_executor.setdefault(p.executor, []).append((p, spec))
        submitted: list[Submitted] = []
        for executor, items in by_executor.items():
            submitted += get_backend(executor).submit(items, folder, python)
        store.mark_submitted(
            [
                {"point_id": s.point_id, "job_id": s.job_id, "job_folder": s.job_folder, "log_path": s.log_path}
                for s in submitted
                if s.job_id is not None
            ]
        )
        for s in submitted:
            if s.job_id is None:
                store.set_state(s.point_id, "rejected", s.error)
    return campaign_id, submitted
