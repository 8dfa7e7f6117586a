"""scripts/local-slurm.sh after a session that ended without ``stop`` (its daemons killed):
a killed daemon is not "already running" while it lingers as a zombie, and a controller
started afresh cancels the jobs its saved state brings back (they held the GPUs as RUNNING
for half an hour and kept a whole CI run's SLURM tests pending). The script's own
functions, run by bash with shims for SLURM's clients: no cluster is touched.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "local-slurm.sh"


def _functions(*names: str) -> str:
    """The bash source of the script's functions ``names`` (each from ``name() {`` to its ``}``,
    or one line)."""
    text = SCRIPT.read_text()
    out = []
    for name in names:
        m = (re.search(rf"^{name}\(\) {{\n.*?^}}\n", text, re.M | re.S)
             or re.search(rf"^{name}\(\) {{ .*}}\n", text, re.M))  # a one-line function
        assert m, f"{name}() not found in {SCRIPT}"
        out.append(m.group(0))
    return "".join(out)


def _bash(source: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", source], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})


def test_a_killed_daemon_left_a_zombie_is_not_running(tmp_path):
    """A child that exited and was never reaped keeps its name in /proc/PID/comm; ``running``
    must say it is gone, or ``start`` skips it and waits a minute for nodes that never come."""
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        for _ in range(200):  # until the kernel marks it a zombie (we never wait() on it yet)
            if Path(f"/proc/{zombie.pid}/stat").read_text().rsplit(") ", 1)[1].startswith("Z"):
                break
            time.sleep(0.05)
        comm = Path(f"/proc/{zombie.pid}/comm").read_text().strip()
        (tmp_path / "dead.pid").write_text(f"{zombie.pid}\n")
        (tmp_path / "live.pid").write_text(f"{live.pid}\n")
        probe = _functions("running") + (
            f'running {tmp_path}/dead.pid {comm} && echo dead:yes || echo dead:no\n'
            f'running {tmp_path}/live.pid {comm} && echo live:yes || echo live:no\n'
            f'running {tmp_path}/live.pid slurmd && echo other:yes || echo other:no\n'
            f'running {tmp_path}/none.pid {comm} && echo none:yes || echo none:no\n')
        res = _bash(probe)
        assert res.stdout.split() == ["dead:no", "live:yes", "other:no", "none:no"], res.stdout + res.stderr
    finally:
        live.kill()
        live.wait()
        zombie.wait()


def test_a_fresh_controller_cancels_the_jobs_its_saved_state_brought_back(tmp_path):
    """``cancel_queue``: every queued id to one scancel, logged with the reason, and it
    returns once the queue is empty; an empty queue asks nothing of scancel."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    state = tmp_path / "queue"
    state.write_text("998\n1004\n1005\n")
    (bin_dir / "squeue").write_text(f"#!/bin/bash\ncat {state}\n")
    (bin_dir / "scancel").write_text(f"#!/bin/bash\necho \"$*\" >> {tmp_path}/scancel.log\n: > {state}\n")
    for tool in ("squeue", "scancel"):
        (bin_dir / tool).chmod(0o755)
    source = ("T0=0\nelapsed() { echo 0.0; }\n" + _functions("log", "cancel_queue")
              + 'cancel_queue "cancelling jobs left from before this start"\ncancel_queue again\n')
    res = _bash(source, {"PATH": f"{bin_dir}:{os.environ['PATH']}"})
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "scancel.log").read_text() == "998 1004 1005\n"  # once: the second found none
    assert res.stderr.splitlines() == ["[local-slurm +  0.0s] cancelling jobs left from before this start: 998 1004 1005 "]


def test_start_cancels_the_queue_only_when_it_started_the_controller():
    """The script's wiring: ``start_slurmctld`` marks a controller it started, and ``cmd_start``
    cancels the queue only then (a running cluster's jobs are another run's)."""
    text = SCRIPT.read_text()
    ctld = _functions("start_slurmctld")
    assert ctld.index("already running") < ctld.index("CTLD_FRESH=1")
    assert '((CTLD_FRESH)) && cancel_queue "cancelling jobs left from before this start"' in _functions("cmd_start")
    assert re.search(r"^CTLD_FRESH=0\b", text, re.M)
