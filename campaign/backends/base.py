"""The protocol every executor implements (registered in ``campaign.backends.BACKENDS``).

Everything campaign asks of a scheduler goes through it: submitting, observing and
cancelling a campaign's points, and what launch, dry run, preflight, status and the
estimates need to know (its caps, its checks, the jobs a dry run shows, how it stops a
job at its time limit, what a rank's device is, whether its GPUs are emulated). No module outside campaign/backends
tests an executor's name (tests/test_backend_protocol.py). The defaults here are a
batch scheduler's that runs one job per point; a backend overrides what differs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Protocol, Sequence, runtime_checkable


@dataclass
class Submitted:
    """The outcome of submitting one point."""

    point_id: int
    job_id: Optional[str]  # None when the scheduler refused it
    job_folder: Optional[str] = None
    log_path: Optional[str] = None
    error: Optional[str] = None  # the scheduler's own message for a refused point
    job: Any = None  # the submitit Job, for a foreground wait (``handle``)
    waiting: Optional[str] = None  # not submitted yet: held back for room in the scheduler (why)
    job_maker: Optional[Callable[[], Any]] = None  # makes ``job`` when first asked (an array's task)

    def handle(self) -> Any:
        """The submitit Job, for a foreground wait; None for a point not submitted."""
        if self.job is None and self.job_maker is not None:
            self.job = self.job_maker()
        return self.job


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


@dataclass
class JobGroup:
    """Points whose jobs a dry run shows together (campaign/launch/dryrun.py): one job
    array (``A1``, a point per task) or the jobs of one resource shape (``L1``, a job per point)."""

    label: str  # how the dry run's table and scripts name it
    executor: str  # the backend that made it (``Backend.name``)
    points: list = field(default_factory=list)  # the PointPlans, in sweep order
    name: str = ""  # the scheduler's job name, where it has one
    tasks: bool = False  # one job array: a point is shown as its task, ``A1[0]``; else as the group, ``L1``


def point_indices(group: JobGroup) -> str:
    """``0, 2, 5``: the sweep indices of a group's points, as a dry run's headings name them."""
    return ", ".join(str(p.idx) for p in group.points)


@runtime_checkable
class Backend(Protocol):
    """What the launch, dry run, ``status``, ``harvest`` and ``cancel`` need of a scheduler:
    bulk operations on a campaign's points, none of which raises for one bad point, and
    what the scheduler is like (module docstring)."""

    name: str
    # Jobs run on this machine: one node, and a job gets the GPUs this machine has (none
    # visible: a GPU platform cannot run here), not a cluster's.
    runs_here: bool = False
    # A pending job waits in a queue shared with others, for a time nobody can estimate
    # (an ETA says it leaves that wait out); False: it waits only for this campaign's own jobs.
    queue_wait: bool = True
    # Seconds before its time limit this executor ends a job without saying it timed out
    # (the job is seen as failed: campaign.observe.state tells a timeout by its run time); None
    # where the scheduler itself reports TIMEOUT.
    silent_stop_lead_s: Optional[float] = None

    def rank_device(self, platform: Mapping[str, Any]) -> str:
        """What one rank of a job on ``platform`` computes on: ``cuda`` (one GPU) or ``cpu``
        (a CPU process standing in for a GPU)."""
        return "cuda"

    def emulated_gpus(self, platform: Mapping[str, Any]) -> Optional[str]:
        """Why the GPUs a job of ``platform`` gets are emulated (stand-ins with CPU ranks behind
        them: no compute capability to build for), in words a dry run prints; None for real
        GPUs, or where the scheduler does not say: the point's compute capability is then
        checked against its torch build (campaign/launch/arch.py). None by default."""
        return None

    def takes_turns(self, platform: Mapping[str, Any]) -> bool:
        """Whether the jobs of ``platform`` run one after another rather than at once (the
        estimate's wall time adds them up)."""
        return False

    def preflight(self, plans: Sequence[Any]) -> None:
        """Refuse, before anything is stored, what would only fail at submission: the
        scheduler missing or not answering, a partition it does not have (``ConfigError``,
        one line with the fix). A dry run shows the refusal as a note. None by default."""
        return None

    def placement_refusals(self, plans: Sequence[Any]) -> dict[int, str]:
        """The points (by position in ``plans``) the scheduler could never place, each with
        its reason, so that a sweep leaves them out alone before anything is stored (SLURM:
        more nodes than the partition has). Nothing by default, and nothing where the scheduler
        does not answer (``preflight`` says why)."""
        return {}

    def cluster_facts(self, plans: Sequence[Any]) -> dict[str, Any]:
        """What the scheduler says now of the resources ``plans`` rely on, as JSON values (SLURM:
        each partition's nodes, GPUs and cores a node), recorded in a saved plan and compared
        when it is submitted. Nothing by default."""
        return {}

    def dry_run_groups(self, plans: Sequence[Any], campaign_id: str) -> list[JobGroup]:
        """The jobs ``plans`` go in, as ``submit`` makes them; by default one job per point,
        grouped by resources for reading and labelled with the executor's initial."""
        from campaign.backends.sbatch import group_items

        prefix = self.name[:1].upper()
        return [JobGroup(f"{prefix}{i + 1}", self.name, [p for p, _ in group])
                for i, group in enumerate(group_items([(p, {}) for p in plans]))]

    def dry_run_count(self, groups: Sequence[JobGroup]) -> str:
        """How a dry run's first line counts ``groups`` (``3 local job(s)``)."""
        return f"{sum(len(g.points) for g in groups)} {self.name} job(s)"

    def dry_run_script(self, group: JobGroup, folder: Path, python: Optional[str], env_note: str) -> list[str]:
        """The lines ``--show-scripts`` prints for ``group``: by default the command each
        rank runs (``python``: submitit's interpreter string; ``env_note``: the lines that
        say what environment the command gets, or "")."""
        from campaign.backends.sbatch import submit_command

        res = group.points[0].resources
        return [f"== {group.label}: {self.name} jobs of points {point_indices(group)} (one job per point) ==",
                f"# {res.tasks} process(es), one per rank, each running:", env_note + submit_command(folder, python),
                ""]

    def submit_callables(self, calls: Sequence[Callable[[], Any]], folder: Path, resources: Any,
                         name: str) -> list[tuple[Any, Optional[BaseException]]]:
        """Run each picklable no-argument callable as one job with ``resources``, its files
        in ``folder`` (a Hydra app's points, campaign/launch/generic.py): ``(submitit job,
        None)`` each, or ``(None, the error)`` for one that could not start."""
        raise NotImplementedError(f"executor {self.name} does not run a Hydra app's jobs")

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
