"""Where jobs run: one module per executor behind the small protocol in ``base``.

``BACKENDS`` is the one registry of executors (``platform.executor``): a name and the
class that implements ``base.Backend``, imported only when a command needs it (submitit
is not loaded to read a status). Adding a scheduler = one module here and one line.
"""

from __future__ import annotations

import importlib

from campaign.backends.base import Backend, Observed, Submitted

BACKENDS: dict[str, str] = {
    "local": "campaign.backends.local:LocalBackend",  # processes on this machine (submitit's LocalExecutor)
    "slurm": "campaign.backends.slurm:SlurmBackend",  # sbatch through submitit, bulk sacct/squeue, scancel
}
EXECUTORS = tuple(BACKENDS)


def get_backend(executor: str) -> Backend:
    """The backend of ``executor``; ValueError naming the registered ones for another name."""
    try:
        module, cls = BACKENDS[executor].split(":")
    except KeyError:
        raise ValueError(f"unknown executor '{executor}'; available: {', '.join(EXECUTORS)}") from None
    return getattr(importlib.import_module(module), cls)()


__all__ = ["BACKENDS", "EXECUTORS", "Backend", "Observed", "Submitted", "get_backend"]
