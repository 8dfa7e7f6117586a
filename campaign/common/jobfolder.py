"""The job folder's layout: every path a campaign's jobs and commands meet on disk.

::

    <results_dir>/jobs/                               jobs_root
      <campaign id>/                                  job_folder (a checked id: campaign.common.ids)
        controllers.log                               CONTROLLERS_LOG: local controllers' own output
        spool/p<point>-a<attempt>-r<rank>.jsonl       spool_folder, spool_key: trainers.writer's
                                                      operations the store did not take
        checkpoints/                                  checkpoint_folder: the ranks' checkpoints
        <job>_<task>_log.err, <job>_<task>_log.out    task_log, job_log_pattern, log_task: submitit's logs per
                                                      task (rank); a failing rank's traceback ends .err
        <job>_<task>_result.pkl, <job>_submitted.pkl  submitit's pickles: never unpickled on the host
                                                      (campaign.backends.joblogs reads the logs instead)

A leaf: it imports the standard library and campaign.common.ids only. Launch (which makes
the folder), the backends (which read its logs), campaign.observe.state (which counts the
spool files) and campaign.observe.ingest (which replays them) all name these paths here, so a
read path never imports a write path to learn where a file lies.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Optional, Pattern

from campaign.common.ids import SPOOL_NAME, check_campaign_id

JOBS = "jobs"  # <results_dir>/jobs: one job folder per campaign
SPOOL = "spool"
CHECKPOINTS = "checkpoints"
CONTROLLERS_LOG = "controllers.log"  # the job folder's local controllers' own output (detached_stdio)
SPOOL_GLOB = "p*-a*-r*.jsonl"  # the spool files not yet ingested (SPOOL_NAME's shape)
SPOOL_FORM = "p<point>-a<attempt>-r<rank>.jsonl"
SPOOL_FOLDER_FORM = f"<results>/{JOBS}/<campaign>/{SPOOL}"


def jobs_root(results_dir: Path | str) -> Path:
    """``<results_dir>/jobs``: the folder holding every campaign's job folder."""
    return Path(results_dir) / JOBS


def job_folder(results_dir: Path | str, campaign_id: object) -> Path:
    """``<results_dir>/jobs/<campaign id>``; ``StoreError`` for an id that is not one
    campaign writes (``../x`` is never joined into a path)."""
    return jobs_root(results_dir) / check_campaign_id(campaign_id)


def spool_folder(folder: Path | str) -> Path:
    """Where the ranks of a job folder's jobs spool what the store did not take."""
    return Path(folder) / SPOOL


def checkpoint_folder(folder: Path | str) -> Path:
    """Where the ranks of a job folder's jobs keep their checkpoints."""
    return Path(folder) / CHECKPOINTS


def spool_dir(campaign: dict) -> Optional[Path]:
    """``<results>/jobs/<campaign id>/spool`` of a stored campaign (None without a results
    folder); ``StoreError`` for a stored id that is not one campaign writes."""
    if not campaign.get("results_dir"):
        return None
    return spool_folder(job_folder(campaign["results_dir"], campaign.get("id")))


def spool_key(name: str) -> Optional[tuple[int, int, int]]:
    """(point id, attempt no, rank) a spool file's name stands for; None for another name."""
    m = SPOOL_NAME.fullmatch(name)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


def spool_campaign(path: Path) -> Optional[str]:
    """The campaign a spool file's folder stands for (``<results>/jobs/<campaign>/spool``),
    unchecked; None for a file outside a spool folder."""
    return path.parent.parent.name if path.parent.name == SPOOL else None


def task_log(job_id: str, task: int | str, stream: str = "err") -> str:
    """The name of submitit's log of one task (rank) of a job: ``<job>_<task>_log.<stream>``."""
    return f"{job_id}_{task}_log.{stream}"


def job_log_pattern(job_id: str) -> Pattern[str]:
    """The names of a job's task logs (``fullmatch``: group 1 the task, group 2 err or out).
    An array job's id holds an underscore (``123_4``): it is matched as one literal."""
    return re.compile(rf"{re.escape(str(job_id))}_(\d+)_log\.(err|out)")


def log_task(name: str) -> Optional[tuple[str, str]]:
    """The task (rank) number and stream a task log's name stands for
    (``123_4_2_log.err`` -> ``("2", "err")``); None for another name."""
    m = re.fullmatch(r".+_(\d+)_log\.(err|out)", name)
    return (m.group(1), m.group(2)) if m else None


def sibling_task_log(log_path: str, task: str) -> Optional[str]:
    """Task ``task``'s ``.err`` log beside task 0's (``<job>_0_log.err``), where ``log_path``
    is task 0's and the other one exists; None otherwise."""
    zero = task_log("", 0)  # "_0_log.err"
    if not log_path.endswith(zero):
        return None
    theirs = log_path[:-len(zero)] + task_log("", task)
    return theirs if os.path.exists(theirs) else None
