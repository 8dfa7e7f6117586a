"""The SLURM executor: one submitit job array per group of points with equal
resources, one ``sacct`` (and at most one ``squeue``) per refresh, one ``scancel``.

Inside an array task submitit's sbatch script runs ``srun`` with
``--ntasks-per-node`` tasks: one task per rank, each rank one GPU
(``--gpus-per-node``) and ``--cpus-per-task`` cores; ``trainers.dist`` builds the
process group from submitit's ``JobEnvironment``.
"""

from __future__ import annotations

import functools
import os
import pickle
import re
import shutil
import signal
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from submitit.core.utils import DelayedSubmission, JobPaths
from submitit.slurm.slurm import SlurmExecutor, SlurmJob

from campaign.backends import sacct as sa
from campaign.backends import sbatch as sb
from campaign.backends import slurm_nodes as sn
from campaign.backends.base import Backend, JobGroup, Limit, Observed, Submitted, point_indices
from campaign.backends.entry import MAX_TIME_LIMIT_REQUEUES, JobEntry, entry_for
from campaign.backends.resources import Resources
from campaign.backends.slurm_submit import QUERY_TIMEOUT_S, ControllerFull, queued_with_comment, run_sbatch
from campaign.common.errors import CampaignError, ConfigError, SchedulerError, SubmitError, one_line
from campaign.common.ids import job_id_problem
from campaign.common.proc import CommandError, Completed, run
from campaign.common.untrusted import make_job_folder, write_new

# The job ids this backend stores: an array task, ``<array job>_<task>`` (submit_array), or
# a plain job; sacct/squeue take them as a list, scancel one by one.
JOB_ID = re.compile(r"[1-9]\d{0,9}(?:_\d{1,7})?")


def bad_job_id(job_id: str) -> Optional[str]:
    """Why a stored job id is never sent to SLURM (campaign.common.ids), or None when it is one."""
    return job_id_problem(job_id, JOB_ID, "SLURM", "123 or 123_4")


class SlurmJobEntry(JobEntry):
    """``JobEntry`` that ignores submitit's USR2 (sent ``signal_delay_s`` before the time limit).

    submitit answers USR2 by checkpointing and requeuing a ``Checkpointable``, and
    otherwise by raising in rank 0: the job ends FAILED 90 s (or, SLURM's signal
    timing being coarse, up to a minute more) before its limit, and a job with a
    limit under 90 s fails at once. Timing runs do not checkpoint: they run to the
    end or to the limit, and SLURM then says TIMEOUT, which is the truth.
    """

    def __call__(self) -> Any:
        signal.signal(signal.SIGUSR2, signal.SIG_IGN)
        return super().__call__()


class CampaignSlurmExecutor(SlurmExecutor):
    """submitit's SlurmExecutor with sbatch run through ``campaign.common.proc`` (scrubbed
    environment, retries, SLURM's message) and arrays of any size submitted by it."""

    sbatch_attempts = 4
    sbatch_backoff_s = 1.0

    def _submit_command(self, command: str) -> SlurmJob:
        # submitit's PicklingExecutor._submit_command, with run_sbatch for its subprocess
        uid = uuid.uuid4().hex
        script = JobPaths.get_first_id_independent_folder(self.folder) / f".submission_file_{uid}.sh"
        # The submission's own mark, so that one sbatch got no answer for is found in the
        # queue (run_sbatch) instead of being submitted twice.
        tag = f"campaign-submission-{uid}"
        if "comment" not in (self.parameters.get("additional_parameters") or {}):  # a site's own comment wins
            self.parameters["comment"] = tag
        # a new file of its own: never through a link someone left at that name
        write_new(script, self._make_submission_file_text(command, uid).encode())
        try:
            out = run_sbatch(script, attempts=self.sbatch_attempts, backoff_s=self.sbatch_backoff_s, runner=run,
                             find_queued=(lambda: queued_with_comment(tag)) if self.parameters.get("comment") == tag
                             else None)
        except SubmitError:
            script.unlink(missing_ok=True)
            raise
        job = self.job_class(folder=self.folder, job_id=self._get_job_id_from_submission_command(out),
                             tasks=list(range(self._num_tasks())))
        job.paths.move_temporary_file(script, "submission_file", keep_as_symlink=True)
        return job

    def submit_array(self, entries: Sequence[Any]) -> list[SlurmJob]:
        """One sbatch ``--array=0-(n-1)`` for ``entries`` (even for one), as submitit's
        own array path does, but through this class: its tasks' jobs."""
        array = self.submit_array_ids(entries)
        return [array.job(i) for i in range(array.count)]

    def submit_array_ids(self, entries: Sequence[Any]) -> "ArrayJobs":
        """``submit_array`` without a submitit ``Job`` a task: the array as it was
        submitted (``ArrayJobs``), whose tasks' jobs are made when asked (a launch that
        returns at once waits on none: 10,000 of them were a sixth of its time)."""
        folder = JobPaths.get_first_id_independent_folder(self.folder)
        make_job_folder(folder, fresh=False)  # this user's own private folder, or refused
        where = str(folder)
        pickles = []
        for entry in entries:
            delayed = DelayedSubmission(entry)
            delayed.set_timeout(self.parameters.get("time", 5), self.max_num_timeout)
            path = os.path.join(where, f"{uuid.uuid4().hex}.pkl")
            _dump(delayed, path)
            pickles.append(path)
        self.parameters["map_count"] = len(entries)
        try:
            first = self._submit_command(self._submitit_command_str)
        except BaseException:
            for path in pickles:
                Path(path).unlink(missing_ok=True)
            raise
        finally:
            self.parameters.pop("map_count", None)
        array = ArrayJobs(self.folder, str(first.job_id), len(entries), first.num_tasks)
        for i, path in enumerate(pickles):
            os.rename(path, array.submitted_pickle(i))
        return array


class ArrayJobs:
    """A submitted job array's tasks: ``<array id>_<i>``, each with submitit's paths
    (``JobPaths``) and a ``SlurmJob`` made when asked. A task's paths are worked out by
    string where the folder holds no submitit tag (``%j``...) and submitit's own
    ``JobPaths`` gives the same for task 0 (checked once an array); else by ``JobPaths``."""

    def __init__(self, folder: Path, array_id: str, count: int, num_tasks: int):
        self.folder, self.array_id, self.count, self.num_tasks = folder, array_id, count, num_tasks
        where = str(JobPaths(folder).folder)
        probe = JobPaths(folder, job_id=f"{array_id}_0")
        self._where: Optional[str] = where if "%" not in str(folder) and (
            str(probe.submitted_pickle) == f"{where}/{array_id}_0_submitted.pkl"
            and str(probe.stderr) == f"{where}/{array_id}_0_0_log.err") else None

    def job_id(self, i: int) -> str:
        return f"{self.array_id}_{i}"

    def submitted_pickle(self, i: int) -> str:
        if self._where is None:
            paths = JobPaths(self.folder, job_id=self.job_id(i))
            paths.folder.mkdir(parents=True, exist_ok=True)
            return str(paths.submitted_pickle)
        return f"{self._where}/{self.array_id}_{i}_submitted.pkl"

    def stderr(self, i: int) -> str:
        """Task ``i``'s first rank's stderr (``JobPaths.stderr``)."""
        if self._where is None:
            return str(JobPaths(self.folder, job_id=self.job_id(i)).stderr)
        return f"{self._where}/{self.array_id}_{i}_0_log.err"

    def job(self, i: int) -> SlurmJob:
        return SlurmJob(folder=self.folder, job_id=self.job_id(i), tasks=list(range(self.num_tasks)))


def _dump(delayed: DelayedSubmission, path: Path) -> None:
    """The job's pickle as ``DelayedSubmission.dump`` writes it (the job unpickles it as
    submitit does), made by the C pickler: an entry is a module-level class, pickled by
    reference, several times sooner than submitit's pickler written in Python (a tenth of a
    10,000-point launch); a new file, 0600 (``write_new``). What the C pickler refuses goes
    through ``DelayedSubmission.dump`` as before."""
    try:
        data = pickle.dumps(delayed, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError):
        delayed.dump(path)
        return
    write_new(path, data)


@functools.lru_cache(maxsize=8)
def node_features(path: str, slurm_conf: str) -> str:
    """``sinfo -h -a -o '%R|%f'``: each partition's node groups and their features, asked once
    per launch (cached per ``PATH`` and ``SLURM_CONF``, the client and the cluster it asks:
    a launch plans every point of a sweep, and each asks); "" when sinfo is not on PATH or
    does not answer (nothing is then emulated: every point is checked)."""
    if shutil.which("sinfo") is None:
        return ""
    try:
        return run(["sinfo", "-h", "-a", "-o", "%R|%f"], timeout=30.0, env=sb.scrubbed_environ(os.environ)).stdout
    except CommandError:
        return ""


class SlurmBackend(Backend):
    name = "slurm"

    def __init__(self) -> None:
        self._config: Optional[str] = None  # `scontrol show config`, read once ("" if it failed)
        self._max_array: Optional[int] = None

    # ------------------------------------------------------------------ submit
    def _cluster_config(self) -> str:
        if self._config is None:
            try:
                self._config = run(["scontrol", "show", "config"], timeout=QUERY_TIMEOUT_S).stdout
            except CommandError:
                self._config = ""
        return self._config

    def max_array_size(self) -> int:
        """The cluster's MaxArraySize (``scontrol show config``, read once)."""
        if self._max_array is None:
            text = self._cluster_config()
            self._max_array = sa.parse_max_array_size(text) if text else sb.DEFAULT_MAX_ARRAY_SIZE
        return self._max_array

    def limits(self, plans: Sequence[Any]) -> list[Limit]:
        """MaxJobCount and MaxSubmitJobs (association, QOS), with the room each leaves now
        (campaign/backends/slurm_limits.py)."""
        from campaign.backends.slurm_limits import slurm_limits

        return slurm_limits(plans, self._cluster_config())

    def submit(self, items: Sequence[tuple[Any, dict]], folder: Path, python: Optional[str]) -> list[Submitted]:
        """One job array per resource group (split at MaxArraySize); a group sbatch
        refuses is reported on each of its points with SLURM's message, the other
        groups still go. Once sbatch meets a full controller (``ControllerFull``) that
        array and every later one stay ``waiting`` (``Submitted.waiting``), untried."""
        folder = Path(folder).absolute()
        by_point: dict[int, Submitted] = {}
        try:
            sb.check_folder(folder)
        except ConfigError as exc:
            return [Submitted(spec.point_id, None, error=str(exc)) for _, spec in items]
        groups = sb.group_items(items)
        max_array = self.max_array_size() if groups else sb.DEFAULT_MAX_ARRAY_SIZE
        full: Optional[str] = None  # a waiting reason once sbatch met a full controller
        for group in groups:
            resources = group[0][0].resources
            campaign_id = group[0][1].campaign_id
            for part, chunk in enumerate(sb.chunks(group, max_array)):
                if full is not None:  # the arrays after it would meet it too: they wait, untried
                    by_point.update({spec.point_id: Submitted(spec.point_id, None, waiting=full) for _, spec in chunk})
                    continue
                for s in self._submit_chunk(chunk, resources, sb.job_name(campaign_id, resources, part), folder, python):
                    by_point[s.point_id] = s
                    full = full or s.waiting
        return [by_point[spec.point_id] for _, spec in items]

    def _submit_chunk(self, chunk: Sequence[tuple[Any, dict]], resources: Resources, name: str,
                      folder: Path, python: Optional[str]) -> list[Submitted]:
        ids = [spec.point_id for _, spec in chunk]
        try:
            params = sb.sbatch_parameters(resources, name)
            ex = CampaignSlurmExecutor(folder, python=sb.rank_python(python),
                                       **({"max_num_timeout": MAX_TIME_LIMIT_REQUEUES} if resources.checkpoint else {}))
            ex.update_parameters(**params)
            array = ex.submit_array_ids([entry_for(spec, SlurmJobEntry) for _, spec in chunk])
        except ControllerFull as exc:  # not refused: the controller is full now; the next wave takes them
            return [Submitted(pid, None, waiting=sb.full_reason(exc.line)) for pid in ids]
        except CampaignError as exc:
            return [Submitted(pid, None, error=str(exc)) for pid in ids]
        except (OSError, ValueError, RuntimeError) as exc:  # folder not writable, submitit's own checks
            return [Submitted(pid, None, error=one_line(f"{type(exc).__name__}: {exc}")) for pid in ids]
        where = str(folder)
        return [Submitted(pid, array.job_id(i), job_folder=where, log_path=array.stderr(i),
                          job_maker=functools.partial(array.job, i))
                for i, pid in enumerate(ids)]

    def submit_callables(self, calls: Sequence[Callable[[], Any]], folder: Path, resources: Resources,
                         name: str) -> list[tuple[Any, Optional[BaseException]]]:
        """One job array for ``calls`` (a Hydra app's points); an array sbatch refuses is
        every call's error. A full controller (``ControllerFull``) is not a refusal: the
        calls stay unsubmitted, each with one line that says so and what to do
        (``sb.full_error``)."""
        try:
            ex = CampaignSlurmExecutor(folder, python=sb.host_python())  # -P: nothing from the launch folder
            ex.update_parameters(**sb.sbatch_parameters(resources, sb.safe_name(name)))
            return [(job, None) for job in ex.submit_array(list(calls))]
        except ControllerFull as exc:  # nothing went; no store to wait in: the sweep is launched again
            error = SubmitError(sb.full_error(exc.line, len(calls)))
            return [(None, error) for _ in calls]
        except Exception as exc:  # sbatch refused the array: every point of it
            return [(None, exc) for _ in calls]

    # ------------------------------------------------------------------ before a launch
    def preflight(self, plans: Sequence[Any]) -> None:
        """SLURM's client is on PATH, its controller answers, and every partition exists."""
        if not plans:
            return
        platforms = ", ".join(sorted({p.platform for p in plans}))
        if shutil.which("sbatch") is None:
            raise ConfigError(f"sbatch not found on PATH: platform {platforms} submits to SLURM; "
                              "load SLURM (e.g. module load slurm) or use platform=local")
        try:
            out = run(["sinfo", "-h", "-a", "-o", "%R"], timeout=30.0, env=sb.scrubbed_environ(os.environ)).stdout
        except CommandError as exc:
            raise ConfigError(f"SLURM does not answer ({exc}); nothing was submitted or stored, "
                              "launch again once `sinfo` works") from None
        partitions = sorted({line.strip() for line in out.splitlines() if line.strip()})
        for p in plans:
            part = p.resources.partition
            if part and partitions and part not in partitions:
                raise ConfigError(f"platform {p.platform}: SLURM has no partition '{part}'; "
                                  f"available: {', '.join(partitions)} (set platform.partition)")

    def _partition_groups(self, plans: Sequence[Any]) -> dict[str, list]:
        """The partitions ``plans`` use -> their node groups (``sinfo``: nodes, GPUs and cores
        a node); {} where no partition is named or sinfo is missing or does not answer."""
        wanted = {p.resources.partition for p in plans if p.resources.partition}
        if not wanted or shutil.which("sinfo") is None:
            return {}
        try:
            out = run(["sinfo", "-h", "-a", "-e", "-o", "%R|%D|%G|%c"], timeout=30.0,
                      env=sb.scrubbed_environ(os.environ)).stdout
        except CommandError:
            return {}
        return sn.partition_nodes(out, wanted)

    def cluster_facts(self, plans: Sequence[Any]) -> dict[str, Any]:
        """Each partition ``plans`` use: its node groups as ``[nodes, GPUs a node, cores a
        node]`` (a saved plan records them: campaign/launch/savedplan.py)."""
        return {"partitions": {part: [list(g) for g in groups]
                               for part, groups in sorted(self._partition_groups(plans).items())}}

    def placement_refusals(self, plans: Sequence[Any]) -> dict[int, str]:
        """Points their partition can never place (``sinfo``: its nodes, with their GPUs
        and cores): more nodes than it has, or more GPUs or cores a node than enough of its
        nodes have. sbatch would only say "Node count specification invalid" or "Requested
        node configuration is not available"."""
        groups = self._partition_groups(plans)  # partition -> [(nodes, GPUs, cores) per node group]
        refusals = {}
        for i, p in enumerate(plans):
            why = sn.placement_problem(p.resources, groups.get(p.resources.partition))
            if why:
                refusals[i] = why
        return refusals

    def emulated_gpus(self, platform: Any) -> Optional[str]:
        """Why ``platform``'s GPUs are emulated: every node of its partition (those with its
        ``constraint``'s features, if it has one) carries the feature ``emulated_gpu``
        (campaign/backends/slurm_nodes.py); None otherwise, for a platform without a partition
        (the cluster's default), or where ``sinfo`` is missing or does not answer."""
        part, constraint = platform.get("partition"), platform.get("constraint")
        if not part:
            return None
        groups = sn.partition_features(node_features(os.environ.get("PATH", ""), os.environ.get("SLURM_CONF", "")))
        if not sn.emulated_gpus(groups.get(str(part)), constraint):
            return None
        which = f" with the constraint {constraint}" if constraint else ""
        return f"SLURM partition {part}: its nodes{which} carry the feature {sn.EMULATED_FEATURE}"

    def dry_run_groups(self, plans: Sequence[Any], campaign_id: str) -> list[JobGroup]:
        """The job arrays ``submit`` makes (grouped by resources, split at SLURM's default
        MaxArraySize: a dry run asks no cluster), ``A1``, ``A2``..."""
        out: list[JobGroup] = []
        for group in sb.group_items([(p, {}) for p in plans]):
            for part, chunk in enumerate(sb.chunks(group, sb.DEFAULT_MAX_ARRAY_SIZE)):
                res = chunk[0][0].resources
                out.append(JobGroup(f"A{len(out) + 1}", self.name, [p for p, _ in chunk],
                                    sb.job_name(campaign_id, res, part), tasks=True))
        return out

    def dry_run_count(self, groups: Sequence[JobGroup]) -> str:
        return f"{len(groups)} sbatch job array(s)"

    def dry_run_script(self, group: JobGroup, folder: Path, python: Optional[str], env_note: str) -> list[str]:
        """The array's exact sbatch script (campaign.backends.sbatch.render_sbatch, as submitit
        writes it) and the command srun runs in each of its tasks."""
        res = group.points[0].resources
        rank = sb.rank_python(python)
        return [f"== {group.label}: sbatch script of points {point_indices(group)} "
                f"(--array=0-{len(group.points) - 1}) ==",
                sb.render_sbatch(sb.sbatch_parameters(res, group.name), folder, rank, len(group.points)).rstrip(),
                f"== {group.label}: the command each of its {res.tasks} task(s) runs (srun, one per rank) ==",
                env_note + sb.submit_command(folder, rank), ""]

    # ------------------------------------------------------------------ observe
    def observe(self, points: Sequence[dict]) -> dict[int, Observed]:
        """One ``sacct`` for all the points' arrays, one ``squeue`` for those pending."""
        jobs = {p["id"]: str(p["job_id"]) for p in points if p.get("job_id")}
        seen: dict[int, Observed] = {}
        for pid, jid in list(jobs.items()):  # a stored id SLURM would read as anything else is never sent
            problem = bad_job_id(jid)
            if problem:
                seen[pid] = Observed("lost", problem)
                del jobs[pid]
        if not jobs:
            return seen
        arrays = sorted({j.split("_")[0] for j in jobs.values()}, key=lambda j: (len(j), j))
        env = dict(os.environ, SLURM_TIME_FORMAT="%s")  # Start/End as unix time
        done = self._query(["sacct", "-j", ",".join(arrays), "-X", "-n", "-P", f"--format={sa.SACCT_FORMAT}"], env)
        rows = sa.parse_sacct(done.stdout)
        waiting = sorted({j for j in jobs.values() if j not in rows or rows[j].state.startswith("PENDING")})
        queued = self._squeue(waiting) if waiting else {}
        arrays_in_sacct = {j.split("_")[0] for j in rows}
        for p in points:
            jid = jobs.get(p["id"])
            if jid is None:
                continue
            row = rows.get(jid)
            error_line = self._error_line(p) if row is not None and row.state.startswith("FAILED") else None
            siblings = "_" in jid and jid.split("_")[0] in arrays_in_sacct
            obs = sa.observation(row, queued.get(jid), p, error_line, now=time.time(), siblings_known=siblings)
            if obs is not None:
                seen[p["id"]] = obs
        return seen

    @staticmethod
    def _query(argv: list[str], env: Optional[dict] = None) -> Completed:
        try:
            done = run(argv, timeout=QUERY_TIMEOUT_S, env=env, check=False)
        except CommandError as exc:
            raise SchedulerError(str(exc)) from exc
        if done.returncode != 0:
            message = one_line(done.stderr) or one_line(done.stdout) or f"exit status {done.returncode}"
            raise SchedulerError(message if message.startswith(argv[0]) else f"{argv[0]}: {message}")
        return done

    def _squeue(self, job_ids: Sequence[str]) -> dict[str, tuple[str, Optional[str]]]:
        """Live state and pending reason; {} when squeue knows none of them (it then fails)."""
        try:
            done = self._query(["squeue", "-h", "-r", "-j", ",".join(job_ids), "-o", sa.SQUEUE_FORMAT])
        except SchedulerError:
            return {}
        return sa.parse_squeue(done.stdout)

    @staticmethod
    def _error_line(p: dict) -> Optional[str]:
        """The exception rank 0's log ends with, else the first other rank's (``rank N:
        ...``: a rank that failed before the attempt was stored, e.g. one that could not
        reach the rendezvous, while srun killed rank 0). Read as text: never the result
        pickle at a path the store names (campaign.backends.joblogs)."""
        from campaign.backends.joblogs import failing_task_exception, job_logs, log_exception

        line = log_exception(p.get("log_path"))
        if line or not p.get("log_path") or not p.get("job_id"):
            return line
        return failing_task_exception(job_logs(os.path.dirname(str(p["log_path"])), str(p["job_id"])))

    # ------------------------------------------------------------------ cancel
    def cancel(self, points: Sequence[dict]) -> list[int]:
        """One ``scancel`` for every point's array task; a point whose stored job id is not
        one campaign writes (``JOB_ID``) is left out (``--``: no id is read as an option)."""
        chosen = [p for p in points if p.get("job_id") and not bad_job_id(str(p["job_id"]))]
        if not chosen:
            return []
        self._query(["scancel", "--", *sorted({str(p["job_id"]) for p in chosen})])
        return [p["id"] for p in chosen]
