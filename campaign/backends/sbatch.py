"""What goes into sbatch, as pure functions: array groups, submitit parameters, the
rendered script, the environment sbatch sees, and how to read its refusals.

submitit renders the script (``#SBATCH`` lines quoted with ``shlex.quote``, which
SLURM's own ``#SBATCH`` parser reads back correctly); what it cannot make safe is
refused here first: a newline would end the ``#SBATCH`` block early (every option
after it silently dropped, the rest run by bash), a ``%`` in a path is a SLURM
file-name pattern, a backslash is an escape inside SLURM's quotes.
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path
from typing import Any, Iterator, Mapping, Optional, Sequence, TypeVar

from campaign.backends.resources import Resources
from campaign.common.errors import ConfigError

# The resolved resources that must be equal for points to share one job array.
RESOURCE_KEYS = (
    "partition", "nodes", "tasks_per_node", "gpus_per_node", "cpus_per_task", "timeout_min",
    "constraint", "account", "qos", "mem_gb", "extra_sbatch", "max_running", "checkpoint",
)
DEFAULT_MAX_ARRAY_SIZE = 1001  # SLURM's default MaxArraySize (indices 0..1000)
DEFAULT_MAX_RUNNING = 256  # submitit's array throttle (--array=0-N%256) when platform.max_running is unset
MAX_JOB_NAME = 96

# The time-limit warning (submitit: ``--signal=USR2@90``). sbatch(1): "the signal may be
# sent up to 60 seconds earlier than specified", so with a limit under 90 + 60 s SLURM
# signals at the job's first check, often while the ranks still import, before any
# handler is installed: USR2's default action ends them ("died by signal: 12").
SUBMITIT_SIGNAL_DELAY_S = 90
SLURM_SIGNAL_SLACK_S = 60
STARTUP_S = 30  # the warning never falls in the job's first this many seconds when the limit allows it

# extra_sbatch options campaign sets itself: overriding them breaks logs, arrays or
# the resource request; the value is the platform field to use instead (or None).
_RESERVED = {
    "array": None, "output": None, "error": None, "open-mode": None, "job-name": None, "wrap": None,
    "signal": None, "partition": "platform.partition", "time": "platform.time_limit_min",
    "nodes": "nodes", "ntasks-per-node": "gpus", "gpus-per-node": "gpus",
    "cpus-per-task": "platform.cpus_per_task", "constraint": "platform.constraint",
    "account": "platform.account", "qos": "platform.qos", "mem": "platform.mem_per_gpu_gb",
}
_BAD_CHARS = re.compile(r"[\x00-\x1f\x7f\\]")  # control characters (newline!) and backslash
_EXTRA = re.compile(r"^--([A-Za-z][A-Za-z0-9_-]*)(?:=(.*))?$", re.S)

T = TypeVar("T")


def check_value(what: str, value: Any) -> None:
    """Refuse a value that cannot be written on one ``#SBATCH`` line."""
    if value is not None and _BAD_CHARS.search(str(value)):
        raise ConfigError(
            f"{what} {str(value)!r} contains a newline, control character or backslash, "
            "which cannot go into an sbatch script; remove it"
        )


def check_folder(folder: Path | str) -> None:
    """Refuse a job folder SLURM would misread (the results_dir it lies in)."""
    text = str(folder)
    if _BAD_CHARS.search(text):
        raise ConfigError(
            f"results folder {text!r} contains a newline, control character or backslash, "
            "which cannot go into an sbatch script; choose another results_dir"
        )
    if "%" in text:
        raise ConfigError(
            f"results folder {text!r} contains '%', which SLURM reads as a file-name pattern (%j, %A); "
            "choose another results_dir"
        )


def group_key(resources: Resources) -> tuple:
    """What points must share to go into one job array."""
    return tuple((k, getattr(resources, k)) for k in RESOURCE_KEYS)


def _image(plan: Any) -> Optional[str]:
    """The container image a plan's job runs in (None: none): one array runs one command."""
    container = (getattr(plan, "config", None) or {}).get("container") or {}
    return None if container.get("runtime", "none") == "none" else container.get("image")


def group_items(items: Sequence[tuple[Any, dict]]) -> list[list[tuple[Any, dict]]]:
    """(plan, spec) pairs grouped by ``plan.resources`` and container image, in order of
    first appearance."""
    groups: dict[tuple, list[tuple[Any, dict]]] = {}
    for plan, spec in items:
        groups.setdefault(group_key(plan.resources) + (("image", _image(plan)),), []).append((plan, spec))
    return list(groups.values())


def chunks(seq: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    """``seq`` in consecutive pieces of at most ``size`` (one job array each)."""
    size = max(1, int(size))
    for start in range(0, len(seq), size):
        yield seq[start:start + size]


def safe_name(text: str) -> str:
    """``text`` reduced to ``[A-Za-z0-9._+-]``: job names never need quoting."""
    name = re.sub(r"[^A-Za-z0-9._+-]+", "_", str(text)).strip("_.")
    return name[:MAX_JOB_NAME] or "campaign"


def group_label(resources: Resources) -> str:
    """Short readable name of a resource group, e.g. ``a100_nvlink-1x2-a100_80g``."""
    parts = [resources.partition or "default", f"{resources.nodes}x{resources.tasks_per_node}"]
    if resources.constraint:
        parts.append(str(resources.constraint))
    return "-".join(str(p) for p in parts)


def job_name(campaign_id: str, resources: Resources, part: int = 0) -> str:
    """``<campaign id>-<group>[-partN]``, sanitised."""
    suffix = f"-part{part + 1}" if part else ""
    return safe_name(f"{campaign_id}-{group_label(resources)}{suffix}")


def parse_extra_sbatch(extra: Sequence[str]) -> dict[str, Any]:
    """``platform.extra_sbatch`` (``["--exclusive", "--reservation=x"]``) as submitit's
    ``additional_parameters``; refuses what campaign sets itself."""
    out: dict[str, Any] = {}
    for arg in extra or ():
        check_value("platform.extra_sbatch entry", arg)
        m = _EXTRA.match(str(arg).strip())
        if not m:
            raise ConfigError(
                f"platform.extra_sbatch entry {arg!r} is not of the form --option or --option=value "
                "(long options only, e.g. --exclusive, --reservation=maint)"
            )
        key, value = m.group(1).replace("_", "-"), m.group(2)
        if key in _RESERVED:
            instead = _RESERVED[key]
            hint = f"; set {instead} instead" if instead else "; campaign sets it itself"
            raise ConfigError(f"platform.extra_sbatch may not set --{key}{hint}")
        out[key] = True if value is None else value
    return out


def sbatch_mem(mem_gb: float) -> str:
    """sbatch's ``--mem`` for ``mem_gb`` gigabytes: whole GB as ``16GB``, else megabytes
    (``1.5`` -> ``1536MB``; SLURM takes integers only)."""
    if mem_gb <= 0:
        raise ConfigError(f"memory per node must be > 0 GB, got {mem_gb}")
    return f"{int(mem_gb)}GB" if float(mem_gb).is_integer() else f"{int(mem_gb * 1024)}MB"


def sbatch_parameters(resources: Resources, name: str) -> dict[str, Any]:
    """submitit ``SlurmExecutor`` parameters of one group (its own names: time, mem, ...)."""
    for key in ("partition", "constraint", "account", "qos"):
        check_value(f"platform.{key}", getattr(resources, key))
    check_value("job name", name)
    params: dict[str, Any] = {
        "job_name": name,
        "partition": resources.partition or None,
        "time": int(resources.timeout_min),
        "signal_delay_s": signal_delay_s(int(resources.timeout_min)),
        "nodes": int(resources.nodes),
        "ntasks_per_node": int(resources.tasks_per_node),  # one srun task per rank
        "cpus_per_task": int(resources.cpus_per_task),
        "gpus_per_node": int(resources.gpus_per_node) or None,
        "constraint": resources.constraint or None,
        "account": resources.account or None,
        "qos": resources.qos or None,
        "mem": sbatch_mem(float(resources.mem_gb)) if resources.mem_gb else None,
    }
    if resources.max_running:
        params["array_parallelism"] = int(resources.max_running)  # --array=0-N%k
    if resources.tasks > 1:
        # A rank that exits with an error ends the job step at once: its peers would
        # otherwise sit in a collective until the process group's timeout (NCCL: 10 min).
        params["srun_args"] = ["--kill-on-bad-exit=1"]
    extra = parse_extra_sbatch(resources.extra_sbatch)
    if extra:
        params["additional_parameters"] = extra
    return {k: v for k, v in params.items() if v is not None}


def signal_delay_s(timeout_min: int) -> int:
    """The ``--signal=USR2@<s>`` lead for a ``timeout_min`` limit: submitit's 90 s, less
    where SLURM's 60 s of slack would bring the warning into the job's first
    ``STARTUP_S`` seconds (a 2-minute limit: 30 s); 0 below 1.5 minutes."""
    room = int(timeout_min) * 60 - SLURM_SIGNAL_SLACK_S - STARTUP_S
    return max(0, min(SUBMITIT_SIGNAL_DELAY_S, room))


# Each rank starts with USR2 ignored (inherited across exec) until the job installs its
# own handler: a warning that comes while the rank starts is not its death. submitit's
# handler (a checkpointing point) and SlurmJobEntry's SIG_IGN then take over.
_IGNORE_USR2 = "/bin/sh -c 'trap \"\" USR2; exec \"$@\"' campaign-rank"


# A job's Python never imports from the folder the launch ran from (issue #41): ``-m``
# puts the working folder first on sys.path, where anyone who can write a shared folder
# could plant ``submitit/__init__.py``. ``-P`` (Python 3.11+) leaves it out for the rank's
# own interpreter; SAFE_PATH_ENV does so for every Python of the job (the local
# controller, a container's Python 3.11+, whatever a rank starts). Python 3.10 has neither.
SAFE_PATH = ("-P",) if sys.version_info >= (3, 11) else ()
SAFE_PATH_ENV = {"PYTHONSAFEPATH": "1"} if SAFE_PATH else {}


def host_python() -> str:
    """This interpreter as a job runs it: ``<sys.executable> -P`` (``SAFE_PATH``)."""
    return " ".join([shlex.quote(sys.executable), *SAFE_PATH])


def job_interpreter(python: Optional[str]) -> str:
    """submitit's ``python=`` for a job: ``python`` as given (a container's command), or
    ``host_python()`` for None."""
    return host_python() if python is None else python


def rank_python(python: Optional[str]) -> str:
    """``python`` (submitit's ``python=``; None: this interpreter, ``host_python``) run with
    USR2 ignored until the job's own handler."""
    return f"{_IGNORE_USR2} {job_interpreter(python)}"


def submit_command(folder: Path | str, python: Optional[str]) -> str:
    """The job's command line, as submitit's ``SlurmExecutor._submitit_command_str``."""
    return " ".join([job_interpreter(python), "-u -m submitit.core._submit", shlex.quote(str(folder))])


def render_sbatch(params: Mapping[str, Any], folder: Path | str, python: Optional[str], map_count: int) -> str:
    """The sbatch script of one job array of ``map_count`` points, exactly as submitit
    writes it (``SlurmExecutor._make_submission_file_text``).

    submitit has no public function for the script; this calls its private renderer
    (pinned: pyproject's submitit bound, tests/test_private_api.py)."""
    from submitit.slurm.slurm import _make_sbatch_string

    check_folder(folder)
    return _make_sbatch_string(command=submit_command(folder, python), folder=folder, map_count=map_count, **params)


# ---------------------------------------------------------------- sbatch's environment and errors

KEEP_ENV = ("SLURM_CONF",)  # where the client finds the cluster: not an inherited job setting


def scrubbed_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` without inherited ``SBATCH_*``/``SLURM_*`` variables.

    sbatch reads ``SBATCH_*`` as options (``SBATCH_PARTITION``, ``SBATCH_ACCOUNT``...)
    and a launcher started inside a job inherits ``SLURM_JOB_ID``, ``SLURM_NTASKS``...;
    either would change the request behind the platform's back.
    """
    return {k: v for k, v in environ.items() if k in KEEP_ENV or not k.startswith(("SBATCH_", "SLURM_"))}


TRANSIENT = (
    "socket timed out",
    "resource temporarily unavailable",
    "slurm_load_jobs error",
    "unable to contact slurm controller",
    "connection refused",
    "transport endpoint is not connected",
    "slurmctld is not responding",
    "try again",
)


def is_transient(message: str) -> bool:
    """Whether sbatch failed for a reason that may pass (controller busy or restarting)."""
    low = message.lower()
    return any(t in low for t in TRANSIENT)


# A controller that answers "full": slurmctld refuses a job that would bring its records to
# MaxJobCount (EAGAIN, "Resource temporarily unavailable"; its log: "MaxJobCount limit from
# slurm.conf reached"), and sbatch, on EAGAIN or a full queue, says so at once, then sleeps
# and retries by itself (1, 2, ... 15 s: two minutes) before it gives up. It is not a dead
# controller: its points wait for the next wave instead of being rejected or retried.
FULL = (
    "maxjobcount",
    "temporarily unable to accept job",  # sbatch: "Slurm temporarily unable to accept job, sleeping and retrying"
    "job queue full",  # sbatch: "Slurm job queue full, sleeping and retrying"
    "resource temporarily unavailable",  # sbatch's last word: "Batch job submission failed: Resource ..."
)
FULL_HINT = "campaign resume submits it when jobs end"  # campaign/launch/waves.py's RESUME_HINT too
FULL_APP_HINT = "launch the sweep again when jobs end"  # a Hydra app's jobs (submit_callables): no store, no resume


def controller_full(stderr: str) -> Optional[str]:
    """The line of sbatch's ``stderr`` that says the controller takes no more jobs now
    (``FULL``), without sbatch's prefixes, or None."""
    for line in str(stderr).splitlines():
        if any(f in line.lower() for f in FULL):
            return sbatch_message(line).rstrip(".").replace("; ", ", ")  # one clause: reports split at "; "
    return None


def full_reason(line: str) -> str:
    """A point's ``waiting`` reason when sbatch met a full controller (``line``:
    ``controller_full``'s), in the form of campaign/launch/waves.py's reasons."""
    return f"waiting for room: SLURM's controller takes no more jobs now (sbatch: {line}); {FULL_HINT}"


def full_error(line: str, jobs: int) -> str:
    """The one-line error of ``jobs`` calls left unsubmitted because sbatch met a full
    controller (``line``: ``controller_full``'s): a Hydra app's array has no store to wait
    in, so the hint is to launch again, not ``FULL_HINT``'s resume."""
    return (f"SLURM's controller takes no more jobs now (sbatch: {line}); none of the array's "
            f"{jobs} job(s) went: {FULL_APP_HINT}")


def sbatch_message(stderr: str, returncode: Optional[int] = None) -> str:
    """SLURM's refusal on one line: ``sbatch: error:`` prefixes dropped, duplicates removed."""
    seen: list[str] = []
    for line in str(stderr).splitlines():
        line = re.sub(r"^\s*(sbatch:\s*)?(error:\s*)?", "", line).strip()
        if line and line not in seen:
            seen.append(line)
    return "; ".join(seen) or (f"sbatch exited with status {returncode}" if returncode is not None else "sbatch failed")
