"""Reading SLURM's answers, as pure functions: ``sacct``/``squeue`` output and the
mapping of every SLURM job state to a store state."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping, Optional

from campaign.backends.base import Observed

SACCT_FORMAT = "JobID,State,ExitCode,Elapsed,NodeList,Start,End,Reason"
SQUEUE_FORMAT = "%i|%T|%r"

# SLURM's job states (sacct and squeue spellings) -> store states.
STATE_MAP = {
    "PENDING": "pending",
    "RUNNING": "running",
    "COMPLETED": "completed",
    "FAILED": "failed",
    "CANCELLED": "cancelled",
    "TIMEOUT": "timeout",
    "OUT_OF_MEMORY": "out_of_memory",
    "NODE_FAIL": "node_fail",
    "PREEMPTED": "preempted",
    "REQUEUED": "requeued",
    "BOOT_FAIL": "boot_fail",
    "DEADLINE": "deadline",
    # transient or rare ones: the job still holds (or will again hold) its allocation
    "CONFIGURING": "running",
    "COMPLETING": "running",
    "RESIZING": "running",
    "SUSPENDED": "running",
    "STOPPED": "running",
    "SIGNALING": "running",
    "STAGE_OUT": "running",
    "REQUEUE_HOLD": "requeued",
    "REQUEUE_FED": "requeued",
    "SPECIAL_EXIT": "requeued",
    "RESV_DEL_HOLD": "pending",
    "REVOKED": "cancelled",  # a federation sibling ran it instead
}

NO_RESULTS = "job ended without reporting results"
SIBLING_GRACE_S = 10.0  # sacct lag: an array task missing next to its siblings for this long was removed
LOST_AFTER_S = 300.0  # far beyond sacct's lag: a job neither sacct nor squeue knows by then is gone


@dataclass(frozen=True)
class SacctRow:
    job_id: str  # "123" or one array task "123_4"
    state: str  # SLURM's word, e.g. "CANCELLED by 0"
    exit_code: str = ""  # "exit:signal", e.g. "1:0"
    elapsed: str = ""
    node_list: str = ""
    start: Optional[float] = None  # unix time (sacct run with SLURM_TIME_FORMAT=%s)
    end: Optional[float] = None
    reason: Optional[str] = None


def expand_job_ids(field: str) -> list[str]:
    """Job ids of one sacct/squeue ``JobID`` field: ``123``, ``123_4``, and the
    not-yet-split pending rest of an array, ``123_[5-7,9%2]``; steps (``123.batch``) -> []."""
    field = field.strip()
    if not field or "." in field:
        return []
    m = re.fullmatch(r"(\d+)_\[([0-9,\-]+)(?:%\d+)?\]", field)
    if not m:
        return [field]
    base, out = m.group(1), []
    for part in m.group(2).split(","):
        if "-" in part:
            lo, hi = part.split("-", 1)
            out += [f"{base}_{i}" for i in range(int(lo), int(hi) + 1)]
        elif part:
            out.append(f"{base}_{int(part)}")
    return out


def _time(text: str) -> Optional[float]:
    text = text.strip()
    return float(text) if re.fullmatch(r"\d+(\.\d+)?", text) and float(text) > 0 else None


def _none(text: str) -> Optional[str]:
    text = text.strip()
    return None if text in ("", "None", "none", "(null)", "None assigned", "Unknown") else text


def parse_sacct(text: str) -> dict[str, SacctRow]:
    """``sacct -X -n -P --format=SACCT_FORMAT`` output -> job id -> row (last row wins:
    plain sacct shows a requeued job's latest run last)."""
    rows: dict[str, SacctRow] = {}
    for line in text.splitlines():
        cols = line.split("|")
        if len(cols) < 2:
            continue
        cols += [""] * (8 - len(cols))
        jid, state, exit_code, elapsed, nodes, start, end, reason = (c.strip() for c in cols[:8])
        for one in expand_job_ids(jid):
            rows[one] = SacctRow(one, state, exit_code, elapsed, _none(nodes) or "", _time(start), _time(end), _none(reason))
    return rows


def parse_squeue(text: str) -> dict[str, tuple[str, Optional[str]]]:
    """``squeue -h -r -o '%i|%T|%r'`` output -> job id -> (state, reason)."""
    out: dict[str, tuple[str, Optional[str]]] = {}
    for line in text.splitlines():
        cols = line.split("|")
        if len(cols) < 3:
            continue
        for one in expand_job_ids(cols[0]):
            out[one] = (cols[1].strip(), _none(cols[2]))
    return out


def parse_max_array_size(text: str) -> int:
    """``MaxArraySize`` from ``scontrol show config`` (SLURM's default when absent)."""
    from campaign.backends.sbatch import DEFAULT_MAX_ARRAY_SIZE

    m = re.search(r"^\s*MaxArraySize\s*=\s*(\d+)", text, re.M)
    return int(m.group(1)) if m and int(m.group(1)) > 0 else DEFAULT_MAX_ARRAY_SIZE


def map_state(slurm_state: str) -> tuple[Optional[str], Optional[str]]:
    """SLURM's state word -> (store state or None if unknown, detail): ``CANCELLED by 0``
    -> ("cancelled", "by uid 0")."""
    word, _, rest = slurm_state.strip().partition(" ")
    detail = None
    m = re.fullmatch(r"by (\d+)", rest.strip())
    if m:
        detail = f"by uid {m.group(1)}"
    elif rest.strip():
        detail = rest.strip()
    word = word.upper()
    if word.endswith("+"):  # sacct abbreviates long words without -P: OUT_OF_ME+
        matches = [k for k in STATE_MAP if k.startswith(word[:-1])]
        word = matches[0] if len(matches) == 1 else word
    return STATE_MAP.get(word), detail


def _exit(code: str) -> str:
    status, _, sig = code.partition(":")
    if sig and sig != "0":
        return f"signal {sig}"
    return f"exit code {status}" if status else "unknown exit status"


def observation(
    row: Optional[SacctRow],
    queued: Optional[tuple[str, Optional[str]]],
    point: Mapping,
    error_line: Optional[str] = None,
    now: Optional[float] = None,
    siblings_known: bool = False,
) -> Optional[Observed]:
    """What the store should say of ``point`` given its sacct row and squeue entry.

    - not in sacct yet (it lags 1-5 s behind sbatch): squeue's view, else pending;
      unknown to both ``LOST_AFTER_S`` after submission (accounting purged or reset): lost;
      an array task unknown to both while sacct lists its array's other tasks
      (``siblings_known``) was removed before it started (scancel of a pending task
      leaves no record of its own): cancelled;
    - COMPLETED: completed only if the job's attempt says so; a job that ended
      without writing its completion did not produce a result -> failed
      (``job ended without reporting results``);
    - FAILED: the rank's own last traceback line (``error_line``) when there is one.
    Returns None when the state is unknown (the store's view stays).
    """
    if row is None:
        if queued is not None:
            state, _ = map_state(queued[0])
            if state in ("pending", "running"):
                return Observed(state, queued[1] if state == "pending" else None)
        submitted = point.get("submitted_at")
        if siblings_known and now is not None and submitted and now - submitted > SIBLING_GRACE_S:
            return Observed("cancelled", "array task removed before it started (scancel); SLURM keeps no record of it")
        if now is not None and submitted and now - submitted > LOST_AFTER_S:
            return Observed("lost", f"SLURM knows no job {point.get('job_id')} (neither sacct nor squeue)")
        return Observed("pending", "submitted; not in SLURM's accounting yet")
    state, detail = map_state(row.state)
    if state is None:
        return None
    where = f" on {row.node_list}" if row.node_list else ""
    if state == "pending":
        reason = queued[1] if queued is not None else row.reason
        return Observed("pending", reason)
    if state == "running":
        return Observed("running", started_at=row.start, node_list=row.node_list or None)
    if state == "requeued":  # it will run again: no end time
        return Observed("requeued", "requeued by SLURM" + (f" ({detail})" if detail else ""))
    done = dict(started_at=row.start, ended_at=row.end, node_list=row.node_list or None)
    if state == "completed":
        if point.get("attempt_state") == "completed":
            return Observed("completed", **done)
        return Observed("failed", f"{NO_RESULTS} (SLURM: COMPLETED, {_exit(row.exit_code)}); see the log", **done)
    reasons = {
        "failed": error_line or f"SLURM: FAILED with {_exit(row.exit_code)}{where}",
        "cancelled": f"cancelled {detail}" if detail else "cancelled",
        "timeout": f"time limit reached after {row.elapsed}" if row.elapsed else "time limit reached",
        "out_of_memory": f"out of memory{where}; raise platform.mem_per_gpu_gb",
        "node_fail": f"node failure{where}",
        "preempted": "preempted by a higher-priority job",
        "boot_fail": f"node failed to boot{where}",
        "deadline": "deadline reached before the job could start",
    }
    return Observed(state, reasons.get(state), **done)
