"""Register validated points in the store and hand them to their executors."""

from __future__ import annotations

import functools
import getpass
import os
import secrets
import shlex
import socket
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Iterator, Optional, Sequence, Union

from campaign.backends import Submitted, get_backend
from campaign.backends.job_spec import JobSpec
from campaign.common.errors import CampaignError, ConfigError, one_line
from campaign.common.jobfolder import checkpoint_folder, spool_folder
from campaign.launch.plan import PointPlan, job_plan
from campaign.common.proc import variables_in_environment
from campaign.common.redact import STORE_URL_ENV, redact, redact_obj
from campaign.store import open_store
from campaign.common.untrusted import make_job_folder

JobPython = Union[None, str, Dict[Optional[str], Optional[str]]]  # one interpreter string, or one per image


def new_campaign_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


def job_spec(p: PointPlan, point_id: int, campaign_id: str, store_url: str, folder: Path,
             attempt_base: Optional[int] = None, image: Optional[dict[str, Any]] = None) -> JobSpec:
    """Everything a rank needs (campaign/backends/job_spec.py); pickled into the job by
    submitit. Secrets are redacted: the job reads the real store URL from its
    environment (``CAMPAIGN_STORE_URL``). ``attempt_base``: the attempt this submission
    opened (its requeues number on from it); ``image``: the container image's provenance
    (``_image_provenance``), recorded in each attempt's provenance."""
    config = p.redacted_config()
    where = _folders(str(folder))
    container = None if config["container"]["runtime"] == "none" else {**config["container"], **(image or {})}
    return JobSpec(
        campaign_id=campaign_id,
        point_id=point_id,
        attempt_base=attempt_base,
        store_url=redact(store_url),
        busy_timeout_s=float(p.config["store"].get("busy_timeout_s", 30.0)),
        config=config,
        plan=job_plan(p),
        threads_per_rank=p.resources.cpus_per_task,
        tasks_per_node=p.resources.tasks_per_node,
        container=container,
        job_folder=where[0],
        spool_dir=where[1],
        checkpoint_dir=where[2],
    )


@functools.lru_cache(maxsize=16)
def _folders(folder: str) -> tuple[str, str, str]:
    """A job folder, its spool and its checkpoints, as a job spec holds them (worked out
    once a folder, not once a point)."""
    return folder, str(spool_folder(folder)), str(checkpoint_folder(folder))


@contextmanager
def store_url_in_environment(url: str) -> Iterator[None]:
    """Jobs started inside get the real store URL in ``CAMPAIGN_STORE_URL`` (their
    environment, not their command line or pickle); the variable is restored after."""
    with variables_in_environment({STORE_URL_ENV: url}):
        yield


def container_environment(points: Sequence[PointPlan]) -> dict[str, str]:
    """The campaign's ``container.env`` as the runtime's prefixed variables
    (``APPTAINERENV_HF_TOKEN``...: campaign.catalogue.container.container_env), real values; empty
    without a container. One campaign runs in one container (``job_python``)."""
    if not points or points[0].config["container"]["runtime"] == "none":
        return {}
    from omegaconf import OmegaConf

    from campaign.catalogue.container import container_env

    return container_env(OmegaConf.create(points[0].config["container"]))


@contextmanager
def private_files() -> Iterator[None]:
    """Files and folders made inside (store, job folders, logs, pickles, and those of
    local jobs started here) are the user's alone: umask 077, or the user's if stricter."""
    old = os.umask(0o077)
    os.umask(old | 0o077)
    try:
        yield
    finally:
        os.umask(old)


def _image_provenance(points: Sequence[PointPlan]) -> dict[Optional[str], Optional[dict[str, Any]]]:
    """Each image's path, sha256, runtime and its version (None without a container):
    measured once per image of the campaign."""
    runtimes = {p.config["container"]["runtime"] for p in points}
    if runtimes <= {"none"}:
        return {}
    from omegaconf import OmegaConf

    from campaign.catalogue.container import image_provenance

    return {image: image_provenance(OmegaConf.create({**points[0].config["container"], "image": image}))
            for image in dict.fromkeys(image_of(p) for p in points)}


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
    command: str,
    python: JobPython = None,
) -> tuple[str, list[Submitted]]:
    """Register the campaign and its points, then submit every point.

    Returns the campaign id and one ``Submitted`` per point. A point its scheduler
    refuses (or that cannot be handed to it at all) is marked ``rejected`` with the
    reason; the rest still go. Points beyond what the scheduler takes now (its caps on
    queued jobs, ``platform.max_submit``: campaign/launch/waves.py) stay ``waiting``,
    each with the cap that holds it back (``Submitted.waiting``). Nothing recorded holds
    a password (``campaign.common.redact``).
    """
    from campaign.launch.waves import wave_for

    store_url = absolute_store_url(store_url)
    campaign_id = new_campaign_id()
    results = Path(results_dir).resolve()
    folder = results / "jobs" / campaign_id
    if os.path.lexists(folder):  # made by someone else before this launch: refused before anything is stored
        raise ConfigError(f"job folder {folder} exists already: this launch did not make it, so it is not used; "
                          f"remove it (rm -r {folder}) and launch again")
    resolved: dict[str, str] = {}  # each point's results_dir, resolved once a launch
    with private_files(), open_store(store_url, create=True) as store:
        ids = store.register(
            {
                "id": campaign_id,
                "name": name,
                "created_at": time.time(),
                "command": redact(command),
                "overrides": redact_obj(list(overrides)),
                "results_dir": str(results),
                "host": socket.gethostname(),
                "user": getpass.getuser(),
            },
            [p.store_row(resolved) for p in points],
        )
        wave = wave_for(points)
        by_id: dict[int, Submitted] = {}
        for i, why in wave.later.items():
            store.hold([ids[i]], why)
            by_id[ids[i]] = Submitted(ids[i], None, waiting=why)
        if wave.now:
            for s in submit_registered(store, [points[i] for i in wave.now], [ids[i] for i in wave.now], campaign_id,
                                       store_url, folder, python, fresh=True):
                by_id[s.point_id] = s
    return campaign_id, [by_id[pid] for pid in ids]


def submit_registered(store: Any, points: Sequence[PointPlan], ids: Sequence[int], campaign_id: str, store_url: str,
                      folder: Path, python: JobPython, *, origin: str = "launch",
                      overrides: Optional[Sequence[str]] = None, fresh: bool = False) -> list[Submitted]:
    """Submit registered points as one submission each (an attempt opened per point,
    ``origin`` and the ``overrides`` applied to it recorded on it) and record the outcome:
    job ids for the submitted ones, ``waiting`` for those the backend held back (its scheduler
    said it was full), ``rejected`` with the reason for the others. Ctrl-C on
    the way records what was submitted, rejects the rest, and raises ``Interrupted``
    saying how to submit them. ``fresh`` (the launch that makes the job folder): the
    folder must not exist yet; otherwise it must be this user's private folder
    (campaign.common.untrusted.make_job_folder)."""
    from campaign.common.errors import Interrupted

    numbers = store.open_attempts(ids, origin=origin, overrides=redact_obj(list(overrides)) if overrides else None)
    done: dict[int, Submitted] = {}
    interrupted = False
    try:
        with private_files():
            _submit(points, ids, campaign_id, store_url, folder, python, done, numbers, fresh=fresh)
    except KeyboardInterrupt:
        interrupted = True
    submitted = [done.get(pid) or Submitted(pid, None, error="interrupted (Ctrl-C) before it was submitted")
                 for pid in ids]
    executors = {pid: p.executor for p, pid in zip(points, ids)}
    store.mark_submitted(  # each job id signed with the user's key: campaign cancel signals no other
        [
            {"point_id": s.point_id, "job_id": s.job_id, "job_folder": s.job_folder, "log_path": s.log_path,
             "attempt_no": numbers.get(s.point_id), "executor": executors.get(s.point_id)}
            for s in submitted
            if s.job_id is not None
        ],
        campaign_id,
    )
    held: dict[str, list[int]] = {}  # the scheduler had no room after all (a full controller): the next wave's
    for s in submitted:
        if s.job_id is None and s.waiting:
            held.setdefault(s.waiting, []).append(s.point_id)
        elif s.job_id is None:
            store.reject(s.point_id, redact(s.error), numbers.get(s.point_id))
    for why, pids in held.items():  # each keeps the attempt opened above, now waiting
        store.hold(pids, why, origin=origin)
    if interrupted:
        left = sum(1 for s in submitted if s.job_id is None)
        raise Interrupted(f"interrupted while submitting campaign {campaign_id}: {len(ids) - left} of {len(ids)} "
                          f"point(s) submitted; campaign resume {campaign_id} submits the others")
    return submitted


def _submit(points: Sequence[PointPlan], ids: Sequence[int], campaign_id: str, store_url: str, folder: Path,
            python: JobPython, done: dict[int, Submitted], numbers: Optional[dict[int, int]] = None,
            fresh: bool = False) -> None:
    """Hand every point to its backend, filling ``done`` (point id -> Submitted) as it goes;
    whatever a backend raises refuses its points (each gets the reason), so no point stays
    ``registered`` with no job."""
    images = _image_provenance(points)
    # one submission per executor and job interpreter: points of different images never share an array
    by_executor: dict[tuple[str, Optional[str]], list[tuple[PointPlan, JobSpec]]] = {}
    for p, pid in zip(points, ids):
        spec = job_spec(p, pid, campaign_id, store_url, folder, (numbers or {}).get(pid), images.get(image_of(p)))
        by_executor.setdefault((p.executor, python_for(python, p)), []).append((p, spec))
    made = False
    with store_url_in_environment(store_url), variables_in_environment(container_environment(points)):
        for (executor, interpreter), items in by_executor.items():
            try:
                if not made:  # <results_dir>/jobs/<campaign id>: results_dir is checked too
                    make_job_folder(folder, fresh=fresh, shared=(folder.parent.parent,))
                    made = True
                got = get_backend(executor).submit(items, folder, interpreter)
            except Exception as exc:  # the backend itself failed: every one of its points is refused
                reason = str(exc) if isinstance(exc, CampaignError) else one_line(f"{type(exc).__name__}: {exc}")
                got = [Submitted(spec.point_id, None, error=reason) for _, spec in items]
            for s in got:
                done[s.point_id] = s


def command_line(overrides: Sequence[str], *, multirun: bool) -> str:
    """The launch command that gives ``overrides`` (rebuilt from Hydra's record of them,
    not from ``sys.argv``), shell-quoted and redacted."""
    return redact(shlex.join(["campaign", "launch", *(["-m"] if multirun else []), *overrides]))


def image_of(p: PointPlan) -> Optional[str]:
    """The container image point ``p``'s job runs in (None without a container); each
    point's own (``container.images`` picked at planning: campaign.catalogue.container.point_image)."""
    container = p.config["container"]
    return None if container["runtime"] == "none" else container.get("image")


def image_lines(points: Sequence[PointPlan]) -> list[str]:
    """``image of platform v100: PATH`` per platform, for a dry run whose points run in more
    than one image (``container.images``); none otherwise (its scripts show the one)."""
    images = {p.platform: image_of(p) for p in points}
    if len(set(images.values())) < 2:
        return []
    return [f"image of platform {name}: {image}" for name, image in images.items()]


def python_for(python: JobPython, p: PointPlan) -> Optional[str]:
    """The interpreter string of ``p``'s job: ``python`` is ``job_python``'s map (image ->
    string) or one string for every point (None: the host's Python)."""
    return python.get(image_of(p)) if isinstance(python, dict) else python


def job_python(points: Sequence[PointPlan]) -> Dict[Optional[str], Optional[str]]:
    """The job interpreter of each image a containerised campaign's points run in
    (``{None: None}``: the host's Python). The container settings other than the image
    are the campaign's: sweeping them is refused."""
    from omegaconf import OmegaConf

    from campaign.catalogue.container import container_python, job_binds
    from campaign.common.errors import ConfigError

    runtimes = {p.config["container"]["runtime"] for p in points}
    if runtimes == {"none"}:
        return {None: None}
    if len({repr({k: v for k, v in p.config["container"].items() if k != "image"}) for p in points}) > 1:
        raise ConfigError("one campaign runs in one container; do not sweep container settings")
    p = points[0]
    binds = job_binds(
        data_dirs=sorted({q.config["dataset"]["root"] for q in points if q.config["dataset"].get("root")}),
        results_dir=p.config["results_dir"],
        code_dir=None,
        extra=list(p.config["container"].get("binds") or []),
    )
    out: Dict[Optional[str], Optional[str]] = {}
    for image in dict.fromkeys(image_of(q) for q in points):
        mine = [q for q in points if image_of(q) == image]
        gpu = any(q.config["platform"]["device"] == "cuda" for q in mine)
        out[image] = container_python(OmegaConf.create({**mine[0].config["container"], "image": image}), binds=binds,
                                      gpu=gpu)
    return out
