"""The protocol every executor implements (registered in ``campaign.backends.BACKENDS``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Protocol, Sequence, runtime_checkable


@dataclass
class Submitted:
    """The outcome of submitting one point."""

    point_id: int
    job_id: Optional[str]  # None when the scheduler refused it
    job_folder: Optional[str] = None
    log_path: Optional[str] = None
    error: Optional[str] = None  # the scheduler's own message for a refused point
    job: Any = None  # the submitit Job, for a foreground wait


@dataclass
class Observed:
    """What the scheduler says of a job now."""

    state: str  # one of campaign_sql.schema's states
    reason: Optional[str] = None
    started_at: Optional[float] = None
    ended_at: Optional[float] = None
    node_list: Optional[str] = None


@runtime_checkable
class Backend(Protocol):
    """What the launch, ``status``, ``harvest`` and ``cancel`` need of a scheduler: three
    bulk operations on a campaign's points, none of which raises for one bad point."""

    name: str

    def submit(self, items: Sequence[tuple[Any, dict]], folder: Path, python: Optional[str]) -> list[Submitted]:
        """Submit (plan, spec) pairs; never raises for one refused point."""
        ...

    def observe(self, points: Sequence[dict]) -> dict[int, Observed]:
        """Scheduler view of the given store points (id -> Observed), one bulk query."""
        ...

    def cancel(self, points: Sequence[dict]) -> list[int]:
        """Cancel the given points' jobs; returns the ids it cancelled."""
        ...
