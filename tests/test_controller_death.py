"""A local job whose controller is SIGKILLed (#25): its ranks notice within a couple of
seconds (trainers/orphan.py: the kernel's parent-death signal, and a watcher thread
for when it never comes) and end themselves; the point is failed with the reason in
``campaign status --json``, and harvest counts nothing. The local default, the sleep
trainer. The unit tests beside it hold the watcher's parts to known answers without a
job."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from conftest import campaign_id_from, until
from test_failure_truth import LONG_SLEEP, _ranks

RANKS_GONE_S = 5.0  # the bound, from the kill to no rank of the job left


def _controller_of(job: str) -> int:
    """The Python controller of local job ``job``: its ranks' parent (the job id itself
    may be the exclusive job's shell, whose child the controller is)."""
    ranks = until(lambda: len(r := _ranks("SUBMITIT_LOCAL_JOB_ID", job)) >= 2 and r, 60, "both ranks")
    (controller,) = {ppid for _, ppid, _ in ranks}
    with open(f"/proc/{controller}/cmdline", "rb") as fh:
        assert b"submitit.local._local" in fh.read()
    return controller


@pytest.mark.slow
def test_a_sigkilled_controller_ends_its_ranks_within_seconds_and_fails_the_point(ws):
    res = ws.launch("-m", "gpus=2", *LONG_SLEEP)
    assert res.returncode == 0, res.stderr
    cid = campaign_id_from(res.stdout)
    job = until(lambda: ws.query("select job_id from point where state = 'running'"), 120, "the job to run")[0][0]
    controller = _controller_of(job)
    # both ranks are past their start (their heartbeat rows): they watch their controller
    until(lambda: ws.query("select count(*) from progress")[0][0] >= 2, 60, "both ranks' progress")
    os.kill(controller, signal.SIGKILL)
    killed = time.monotonic()
    while _ranks("SUBMITIT_LOCAL_JOB_ID", job) and time.monotonic() - killed < 30:
        time.sleep(0.1)
    gone_after = time.monotonic() - killed
    assert gone_after < RANKS_GONE_S, f"ranks still ran {gone_after:.1f} s after their controller was killed"
    wait = ws.campaign("status", cid, "--wait", "--interval", "0.5", "--timeout", "60")
    assert wait.returncode == 1, wait.stdout + wait.stderr
    (p,) = json.loads(ws.campaign("status", cid, "--json").stdout)["points"]
    assert p["state"] == "failed", p
    assert p["reason"].startswith("rank "), p["reason"]
    # the rank reported it (its main thread took the hang-up), or, under load, its watcher
    # ended it 2.5 s later and the log's last line says so (campaign/backends/joblogs.py)
    reported = ("ControllerGone: the job's controller (pid " in p["reason"]
                and "ended while this rank ran (killed?); the rank ended itself (log: " in p["reason"])
    watcher = re.match(r"rank \d: the job's controller \(pid \d+\) ended and this rank did not end within 2.5 s "
                       r"of noticing; ending it \(the job ended without reporting it\)( \(log: [^)]+\))?$", p["reason"])
    assert reported or watcher, p["reason"]
    harvest = ws.campaign("harvest", cid, "--to", "csv")
    assert harvest.returncode == 1 and "no completed point to harvest yet" in harvest.stderr, harvest.stderr


# A stand-in for submitit's controller (its argv names submitit.local._local, as
# orphan._is_controller looks for) that starts one stand-in rank and waits; the rank
# watches it as a real one does, reports what ended it on stdout, and ends.
CONTROLLER = """
import subprocess, sys, time
subprocess.Popen([sys.executable, "-c", sys.argv[1], *sys.argv[2:]])
time.sleep(600)
"""
RANK = """
import os, signal, sys, time
from trainers import orphan
if "no-prctl" in sys.argv:
    orphan._parent_death_signal = lambda sig: False  # the portable fallback alone
if "stuck" in sys.argv:  # a main thread that cannot take the hang-up (as one in native code)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})
print("granted" if orphan.watch_controller() else "watching", flush=True)
try:
    time.sleep(600)
except orphan.ControllerGone as gone:
    print("gone", time.time(), gone, flush=True)
    orphan.end_rank(gone)
"""


def _orphan(tmp_path, *flags: str) -> tuple[float, str]:
    """SIGKILL a stand-in controller once its rank watches; (seconds from the kill until
    the rank is gone, the rank's output)."""
    out = tmp_path / "rank.out"
    env = {**os.environ, "SUBMITIT_EXECUTOR": "local", "PYTHONPATH": os.pathsep.join(sys.path)}
    with open(out, "wb") as fh:
        controller = subprocess.Popen([sys.executable, "-c", CONTROLLER, RANK, "submitit.local._local", *flags],
                                      stdout=fh, stderr=subprocess.STDOUT, env=env)
    try:
        until(lambda: out.read_bytes().startswith((b"granted", b"watching")), 60, "the rank to watch")
        rank = _children(controller.pid)
    finally:
        controller.kill()
        controller.wait()
    killed = time.monotonic()
    while _alive(rank) and time.monotonic() - killed < 30:
        time.sleep(0.05)
    return time.monotonic() - killed, out.read_text()


def _children(pid: int) -> int:
    (child,) = [int(e) for e in os.listdir("/proc") if e.isdigit() and _ppid(int(e)) == pid]
    return child


def _ppid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return int(fh.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


def test_the_kernels_parent_death_signal_ends_a_rank_at_once(tmp_path):
    took, out = _orphan(tmp_path)
    assert out.startswith("granted"), out  # Linux: prctl(PR_SET_PDEATHSIG) granted
    assert took < 2.0, f"{took:.2f} s"
    assert "ended while this rank ran (killed?); the rank ended itself" in out, out
    assert "Traceback" in out and out.rstrip().endswith("the rank ended itself"), out  # its log ends with it


def test_without_the_kernels_signal_the_watcher_ends_a_rank_within_its_poll(tmp_path):
    from trainers import orphan

    took, out = _orphan(tmp_path, "no-prctl")
    assert out.startswith("watching"), out
    assert took < orphan.POLL_S + 1.5, f"{took:.2f} s"  # one poll, then the hang-up and the report
    assert "ended while this rank ran (killed?); the rank ended itself" in out, out


@pytest.mark.slow
def test_a_rank_that_cannot_take_the_hang_up_is_ended_by_its_watcher(tmp_path):
    from trainers import orphan

    took, out = _orphan(tmp_path, "stuck")
    assert "gone" not in out, out  # its main thread never raised
    assert f"did not end within {orphan.REPORT_GRACE_S:g} s of noticing; ending it" in out, out
    assert orphan.REPORT_GRACE_S <= took < orphan.REPORT_GRACE_S + 2.0, f"{took:.2f} s"


def test_a_rank_its_watcher_ended_names_why_in_the_points_reason(tmp_path):
    """The watcher's last line, with no traceback before it, is the rank's reason (a loaded
    machine's rank may not end within the grace: the whole-suite run of 2026-11-28 met it);
    any other last line without a traceback is none."""
    from campaign.backends.joblogs import failing_task_exception

    line = "the job's controller (pid 13177) ended and this rank did not end within 2.5 s of noticing; ending it"
    log = tmp_path / "13175_0_log.err"
    log.write_text("[rank0]:W1128 20:06:34.524000 13179 torch/utils/flop_counter.py:113] triton not found\n"
                   f"{line}\n")
    assert failing_task_exception([log]) == f"rank 0: {line}"
    log.write_text("just some output\n")
    assert failing_task_exception([log]) is None
