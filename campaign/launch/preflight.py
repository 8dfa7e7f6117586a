"""Launch-time checks that need the world outside the config: the store, the results
folder, the scheduler, datasets and container images. They run once per campaign,
after every point is planned and before anything is stored, so that what would only
fail later in a job is refused now, with one line and exit status 2."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Collection, Sequence

from omegaconf import OmegaConf

from campaign.backends import by_executor
from campaign.common.errors import ConfigError, StoreError, one_line
from campaign.launch.plan import PointPlan
from campaign.common.redact import redact
from campaign.common.untrusted import check_shared_folder

# Values one campaign has once: the store it registers in, the folder its jobs write to.
ONE_PER_CAMPAIGN = (("results_dir",), ("store", "url"), ("name",), ("dry_run",), ("max_gpu_hours",))
CONNECT_TIMEOUT_S = 10  # a database server that does not answer by then is refused


def _value(config: dict, path: tuple[str, ...]) -> Any:
    for key in path:
        config = config.get(key) if isinstance(config, dict) else None
    return config


def check_one_per_campaign(points: Sequence[PointPlan]) -> None:
    """Refuse a sweep over a value the whole campaign shares (``store.url=a,b``)."""
    for path in ONE_PER_CAMPAIGN:
        values = sorted({repr(_value(p.config, path)) for p in points})
        if len(values) > 1:
            key = ".".join(path)
            shown = ", ".join(redact(v) for v in values[:3])
            raise ConfigError(f"{key} is one per campaign, but this sweep gives {len(values)} ({shown}); "
                              f"launch one campaign per {key}")


def check_store(url: str) -> None:
    """The store URL names a database this launch and its jobs can reach and keep: a
    parseable URL with its driver installed, not an in-memory SQLite, a folder that can
    hold a SQLite file, a server that answers."""
    from sqlalchemy.engine import make_url

    from campaign.store.store import check_store_url

    check_store_url(url)
    refuse_memory_store(url)
    u = make_url(url)
    if u.get_backend_name() == "sqlite":
        path = Path(u.database).expanduser()
        if path.exists() and not path.is_file():
            raise StoreError(f"store {path} is not a file; name a SQLite file with store.url=sqlite:///PATH")
        check_writable_folder(path.parent, "the store's folder", STORE_OPTION)
        if path.exists() and not os.access(path, os.R_OK | os.W_OK):
            raise StoreError(f"store {path} is not writable by this user; fix its permissions or use another store.url")
        return
    _check_server(url)


def refuse_memory_store(url: str) -> None:
    """An in-memory SQLite store is no store for jobs (other processes): refused."""
    from sqlalchemy.engine import make_url

    u = make_url(url)
    if u.get_backend_name() != "sqlite":
        return
    memory = not u.database or u.database == ":memory:" or "mode=memory" in str(url) or (
        str(u.database).startswith("file::memory:"))
    if memory:
        raise StoreError(f"store URL {redact(url)!r} is an in-memory database: the jobs (other processes) "
                         "cannot write to it and it is gone when the launch ends; use a file, "
                         "e.g. store.url=sqlite:///results/campaign.db")


def _check_server(url: str) -> None:
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import SQLAlchemyError

    u = make_url(url)
    args = {"connect_timeout": CONNECT_TIMEOUT_S} if u.get_backend_name() in ("postgresql", "mysql") else {}
    try:
        engine = create_engine(u, connect_args=args)
    except Exception as exc:  # a bad argument for the driver
        raise StoreError(f"store URL {redact(url)!r}: {one_line(exc)}") from None
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except SQLAlchemyError as exc:
        cause = getattr(exc, "orig", None) or exc
        raise StoreError(f"cannot reach results store {redact(url)}: {redact(one_line(cause))}") from None
    finally:
        engine.dispose()


STORE_OPTION = "store.url=sqlite:///PATH, or --store URL"


def check_writable_folder(folder: Path | str, what: str, option: str = "results_dir=PATH") -> Path:
    """``folder`` exists (made if missing) and this user can create files in it; ``option``:
    what the message offers to choose another one with."""
    folder = Path(folder).expanduser()
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"{what} {folder} is not a folder; choose another one")
    try:
        # made not group-writable even under umask 002: a results_dir others can write is refused
        folder.mkdir(mode=0o755, parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".campaign-write-check-", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise ConfigError(f"{what} {folder} is not writable: {exc.strerror or one_line(exc)}; "
                          f"choose another one ({option}) or fix its permissions") from None
    return folder


def writable_here(folder: Path | str, what: str, option: str = "results_dir=PATH") -> None:
    """``check_writable_folder`` that makes nothing (a dry run): the folder, or the nearest
    folder above it that exists, can be written by this user."""
    folder = Path(folder).expanduser().absolute()
    probe = folder
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        where = "is not a folder" if probe == folder else f"cannot be made: {probe} is a file, not a folder"
        raise ConfigError(f"{what} {folder} {where}; choose another one ({option})")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise ConfigError(f"{what} {folder} is not writable by this user; choose another one ({option}) "
                          "or fix its permissions")


def preflight(points: Sequence[PointPlan], *, dry_run: bool = False, deferred: Collection[str] = ()) -> list[str]:
    """Every check of this module, for the planned points of one campaign.

    ``deferred``: dataset roots whose check waits (a study's stand-in, written after this
    preflight: campaign/launch/study.py's ``write_standins`` checks them then).

    A dry run executes nothing: what this machine lacks for the jobs (a container runtime
    or image, SLURM, a dataset, a store server, a writable folder) is returned as notes
    instead of refused, and nothing is created; what no machine could run (bad values)
    is refused all the same. Returns the notes (none for a launch, which refuses)."""
    from campaign.catalogue.container import check_container, check_container_here, container_lacks, needs_v100_image
    from campaign.catalogue.datasets import check_dataset
    from campaign.common.errors import CampaignError

    notes: list[str] = []

    def here(check, *args) -> None:
        if not dry_run:
            check(*args)
            return
        try:
            check(*args)
        except CampaignError as exc:
            notes.append(str(exc))

    check_one_per_campaign(points)
    first = points[0].config
    url = str(first["store"]["url"])
    if dry_run:
        from campaign.store.store import check_store_url

        from sqlalchemy.engine import make_url

        check_store_url(url)
        refuse_memory_store(url)
        u = make_url(url)
        if u.get_backend_name() == "sqlite":
            here(writable_here, Path(u.database).parent, "the store's folder", STORE_OPTION)
        else:
            here(_check_server, url)
        here(writable_here, first["results_dir"], "results_dir")
        here(check_shared_folder, first["results_dir"], "results_dir")
    else:
        check_store(url)
        check_writable_folder(first["results_dir"], "results_dir")
        # others who could write it could swap the job folders: refused (docs/security.md)
        check_shared_folder(first["results_dir"], "results_dir")
    seen: set = set()
    same: dict[tuple, Any] = {}  # (check, a section's id, ...) -> the section: a launch's points share theirs
    for p in points:
        for check, section in ((check_dataset, p.config["dataset"]), (check_container, p.config["container"])):
            validation = bool(p.config["experiment"].get("validation"))  # reads the test split too
            # a missing image is named with its build command, --v100 for a Volta platform's
            v100 = check is check_container and needs_v100_image(p.config["platform"])
            ident = (check.__name__, id(section), validation, v100)
            if same.get(ident) is section:  # this very section, checked just before
                continue
            same[ident] = section
            key = (check.__name__, repr(sorted(section.items(), key=str)), validation, v100)
            if key in seen:
                continue
            seen.add(key)
            spec = OmegaConf.create(section)
            if check is check_dataset:
                if section.get("root") not in deferred:
                    here(check_dataset, spec, validation)
            else:
                check_container(spec, here=False)
                if dry_run:
                    notes.extend(container_lacks(spec, p.config["platform"]))
                else:
                    check_container_here(spec, p.config["platform"])
    for backend, mine in by_executor(points):  # each scheduler's own checks (SLURM: sbatch, sinfo, partitions)
        here(backend.preflight, mine)
    return list(dict.fromkeys(notes))
