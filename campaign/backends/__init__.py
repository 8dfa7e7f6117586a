"""Where jobs run: one module per executor behind the small protocol in ``base``.

``BACKENDS`` is the one registry of executors (``platform.executor``): a name and the
class that implements ``base.Backend``, imported only when a command needs it (submitit
is not loaded to read a status). Adding a scheduler = one module here and one line:
what campaign asks of a scheduler is the protocol in ``base`` (tests/test_backend_protocol.py
registers a fake one from the test).
"""

from __future__ import annotations

import functools
import importlib
from typing import Any, Optional, Sequence

from campaign.backends.base import Backend, JobGroup, Observed, Submitted

# In the order a dry run lists their jobs (a campaign's SLURM arrays before its local jobs).
BACKENDS: dict[str, str] = {
    "slurm": "campaign.backends.slurm:SlurmBackend",  # sbatch through submitit, bulk sacct/squeue, scancel
    "local": "campaign.backends.local:LocalBackend",  # processes on this machine (submitit's LocalExecutor)
}
EXECUTORS = tuple(sorted(BACKENDS))  # the names campaign.catalogue.config's schema allows (a test checks they agree)


def executors() -> tuple[str, ...]:
    """The registered executors' names now, sorted (a backend registered later included)."""
    return tuple(sorted(BACKENDS))


def get_backend(executor: str) -> Backend:
    """The backend of ``executor``; ValueError naming the registered ones for another name."""
    try:
        where = BACKENDS[executor]
    except (KeyError, TypeError):  # TypeError: a stored value that is no name at all
        raise ValueError(f"unknown executor '{executor}'; available: {', '.join(executors())}") from None
    return _backend_class(where)()


@functools.lru_cache(maxsize=None)
def _backend_class(where: str) -> type:
    """The class ``module:Class`` names, imported once (a launch asks its backend of each
    point several questions: 50,000 lookups at 10,000 points)."""
    module, cls = where.split(":")
    return getattr(importlib.import_module(module), cls)


def backend_of(executor: object) -> Optional[Backend]:
    """The backend of a configured or stored executor name, or None where none has it (a
    store written by another version of campaign): the caller keeps its cautious default."""
    try:
        return get_backend(executor)  # type: ignore[arg-type]
    except ValueError:
        return None


def by_executor(plans: Sequence[Any]) -> list[tuple[Backend, list[Any]]]:
    """``plans`` (PointPlans) grouped by their executor, each group with its backend, in the
    registry's order; ValueError for an executor none has."""
    groups: dict[str, list[Any]] = {}
    for p in plans:
        groups.setdefault(p.executor, []).append(p)
    order = list(BACKENDS)
    ranked = sorted(groups, key=lambda e: order.index(e) if e in order else len(order))
    return [(get_backend(e), groups[e]) for e in ranked]


__all__ = ["BACKENDS", "EXECUTORS", "Backend", "JobGroup", "Observed", "Submitted", "backend_of", "by_executor",
           "executors", "get_backend"]
