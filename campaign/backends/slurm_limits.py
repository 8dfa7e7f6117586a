"""How many more jobs SLURM takes now: the caps a launch reads and the room each leaves.

- ``MaxJobCount`` (``scontrol show config``): job records the controller holds, every
  user's, finished ones included until ``MinJobAge`` passes (``squeue -a -r -t all``);
- ``MaxSubmitJobs`` of the user's association and ``MaxSubmitJobsPerUser`` of a QOS
  (``sacctmgr``, when accounting answers; a cluster without them has no such cap).

An array task counts as one job (SLURM counts them so against MaxSubmitJobs), also
while its array's pending rest is still one record: the room is never overstated.
Parsing is pure; ``slurm_limits`` runs the queries (each failure just drops its cap).

**Headroom under MaxJobCount.** How slurmctld counts (src/slurmctld/job_mgr.c,
``_create_job_record``/``_add_job_record``): a new job of n records (a plain job 1, an
array of n tasks n, counted whole at submission although it is one meta record until its
tasks run; a task split off later adds 0) is refused when ``records + n >= MaxJobCount``,
so at most ``MaxJobCount - 1`` records are ever held; an ended job keeps its record until
``MinJobAge`` passes, and other users submit while a launch runs (their jobs, and those in
hidden partitions or behind ``PrivateData``, may not all be in our ``squeue``). A launch
therefore plans its wave to ``MaxJobCount - 1 - reserve - records``, ``reserve`` being
``HEADROOM_SHARE`` (10 %) of MaxJobCount, rounded up: into an empty 10,000-record cluster
8,999 go now and the rest wait for the next wave. An sbatch that meets the cap anyway
waits too (campaign/backends/slurm_submit.py, ``ControllerFull``).
"""

from __future__ import annotations

import getpass
import math
import re
import time
from typing import Any, Callable, Optional, Sequence

from campaign.backends.base import Limit
from campaign.common.proc import CommandError, Completed, run

QUERY_TIMEOUT_S = 20.0  # sacctmgr waits on slurmdbd: a launch does not wait longer for a cap
CAPS_TTL_S = 300.0  # caps change rarely: `status --wait --submit` asks sacctmgr every 5 min, not every refresh
_caps_cache: dict[tuple, tuple[float, Optional[str]]] = {}
HEADROOM_SHARE = 0.10  # of MaxJobCount kept free for other users' jobs and what squeue does not show


def max_job_count_reserve(max_job_count: int) -> int:
    """Records a launch leaves free under ``max_job_count`` (module docstring): the one the
    controller's strict test (``records + n >= MaxJobCount`` refuses) never admits, and
    ``HEADROOM_SHARE`` of it, rounded up."""
    return 1 + math.ceil(max_job_count * HEADROOM_SHARE)


def parse_config_value(text: str, key: str) -> Optional[int]:
    """An integer setting of ``scontrol show config`` (``MaxJobCount = 10000``), or None."""
    m = re.search(rf"^\s*{re.escape(key)}\s*=\s*(\d+)", text, re.M)
    return int(m.group(1)) if m and int(m.group(1)) > 0 else None


def parse_assoc_max_submit(text: str, account: Optional[str]) -> Optional[int]:
    """The smallest ``MaxSubmit`` of the user's associations (``sacctmgr -n -P show assoc
    user=U format=account,maxsubmit``), of ``account`` only when one is named; None: no cap."""
    caps = []
    for line in text.splitlines():
        cols = line.split("|")
        if len(cols) >= 2 and cols[1].strip().isdigit() and (not account or cols[0].strip() == account):
            caps.append(int(cols[1]))
    return min(caps) if caps else None


def parse_qos_max_submit(text: str) -> dict[str, int]:
    """QOS name -> ``MaxSubmitJobsPerUser`` (``sacctmgr -n -P show qos format=name,maxsubmitpu``),
    for the QOS that have one."""
    out = {}
    for line in text.splitlines():
        cols = line.split("|")
        if len(cols) >= 2 and cols[0].strip() and cols[1].strip().isdigit():
            out[cols[0].strip()] = int(cols[1])
    return out


def parse_queue(text: str) -> list[tuple[str, str]]:
    """``squeue -h -r -o '%q|%a'`` -> one (qos, account) per queued job or array task."""
    return [(c[0].strip(), c[1].strip()) for c in (line.split("|") for line in text.splitlines()) if len(c) >= 2]


def room_limits(plans: Sequence[Any], *, max_job_count: Optional[int], all_jobs: int,
                assoc_max_submit: Optional[int], qos_max_submit: dict[str, int],
                mine: Sequence[tuple[str, str]], default_qos: str = "normal") -> list[Limit]:
    """The scheduler's caps that apply to ``plans`` (SLURM points, in order) and their room
    (``platform.max_submit`` is the campaign's own: campaign/launch/waves.py). Pure."""
    limits: list[Limit] = []
    if max_job_count is not None:
        reserve = max_job_count_reserve(max_job_count)
        limits.append(Limit(f"the cluster's MaxJobCount={max_job_count} ({reserve} kept free)",
                            max_job_count - reserve - all_jobs, used=all_jobs))
    if assoc_max_submit is not None:
        limits.append(Limit(f"your association's MaxSubmitJobs={assoc_max_submit}", assoc_max_submit - len(mine),
                            used=len(mine)))
    by_qos: dict[str, list[int]] = {}
    for i, p in enumerate(plans):
        by_qos.setdefault(p.config["platform"].get("qos") or default_qos, []).append(i)
    for qos, idx in by_qos.items():
        if qos in qos_max_submit:
            used = sum(1 for q, _ in mine if q == qos)
            limits.append(Limit(f"MaxSubmitJobsPerUser={qos_max_submit[qos]} of QOS {qos}", qos_max_submit[qos] - used,
                                frozenset(idx), used=used))
    return limits


def slurm_limits(plans: Sequence[Any], config_text: Optional[str],
                 runner: Callable[..., Completed] = run) -> list[Limit]:
    """Ask SLURM (``squeue``, ``sacctmgr``) what room its caps leave ``plans``; a query that
    fails leaves its cap out (``config_text``: ``scontrol show config``, read by the caller)."""
    user = getpass.getuser()

    def ask(argv: list[str]) -> Optional[str]:
        try:
            done = runner(argv, timeout=QUERY_TIMEOUT_S, check=False)
        except CommandError:
            return None
        return done.stdout if done.returncode == 0 else None

    def cap(argv: list[str]) -> Optional[str]:
        key = (runner, *argv)
        if key not in _caps_cache or time.monotonic() - _caps_cache[key][0] > CAPS_TTL_S:
            _caps_cache[key] = (time.monotonic(), ask(argv))
        return _caps_cache[key][1]

    max_job_count = parse_config_value(config_text or "", "MaxJobCount")
    # -a: jobs in hidden partitions hold records too; -r: one line per array task, as counted
    everyone = ask(["squeue", "-h", "-a", "-r", "-t", "all", "-o", "%i"]) if max_job_count else None
    queue = ask(["squeue", "-h", "-r", "-u", user, "-o", "%q|%a"])
    mine = parse_queue(queue or "")
    accounts = {p.config["platform"].get("account") for p in plans}
    assoc = cap(["sacctmgr", "-n", "-P", "show", "assoc", f"user={user}", "format=account,maxsubmit"])
    qos = cap(["sacctmgr", "-n", "-P", "show", "qos", "format=name,maxsubmitpu"])
    account = next(iter(accounts)) if len(accounts) == 1 else None
    return room_limits(
        plans, max_job_count=max_job_count if everyone is not None else None,
        all_jobs=len((everyone or "").split()), assoc_max_submit=parse_assoc_max_submit(assoc or "", account),
        qos_max_submit=parse_qos_max_submit(qos or ""), mine=mine if queue is not None else [])
