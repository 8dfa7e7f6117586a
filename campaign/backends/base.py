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
    waiting: Optional[str] = None  # not submitted yet: held back for room in the scheduler (why)


@dataclass
class Observed:
    """What the scheduler says of a job now."""

    state: str  # one of campaign_sql.schema's states
    reason: Optional[str] = None
    started_at: Optional[float] = None
    ended_at: Optional[float] = None
    node_list: Optional[str] = None


@dataclass
class Limit:
    """One cap on queued jobs and the room it leaves now."""

    what: str  # how messages name it, e.g. "MaxSubmitJobs of QOS normal (200)"
    room: int  # jobs it admits now (never below 0)
    applies_to: Optional[frozenset[int]] = None  # indices of the points it caps (None: all the executor's)
    used: Optional[int] = None  # jobs already counted against it, for the message

    def applies(self, i: int) -> bool:
        return self.applies_to is None or i in self.applies_to


@runtime_checkable
class Backend(Protocol):
    """What the launch, ``status``, ``harvest`` and ``cancel`` need of a scheduler: bulk
    operations on a campaign's points, none of which raises for one bad point."""

    name: str

    def limits(self, plans: Sequence[Any]) -> list[Limit]:
        """The caps on queued jobs that apply to ``plans`` and the room each leaves now
        (campaign/launch/waves.py); none by default."""
        return []

    def submit(self, items: Sequence[tuple[Any, dict]], folder: Path, python: Optional[str]) -> list[Submitted]:
        """Submit (plan, spec) pairs; never raises for one refused point."""
        ...

    def observe(self, points: Sequence[dict]) -> dict[int, Observed]:
        """Scheduler view of the given store points (id -> Observed), one bulk query."""
        ...

    def cancel(self, points: Sequence[dict]) -> list[int]:
        """Cancel the given points' jobs; returns the ids it cancelled."""
        ...
