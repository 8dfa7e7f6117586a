"""Where jobs run: one module per executor behind the small interface in ``base``."""

from __future__ import annotations

from campaign.backends.base import Backend, Submitted


def get_backend(executor: str) -> Backend:
    if executor == "local":
        from campaign.backends.local import LocalBackend

        return LocalBackend()
    if executor == "slurm":
        from campaign.backends.slurm import SlurmBackend

        return SlurmBackend()
    raise ValueError(f"unknown executor '{executor}'; available: local, slurm")


__all__ = ["Backend", "Submitted", "get_backend"]
