"""The suite's forked commands (tests/forkserver.py) answer as a new interpreter does: the same
exit status, output and error text, in the test's folder and environment."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import FORKS

COMMANDS = [
    ("status",),  # no store here: one line, exit 2
    ("harvest", "--to", "nosuch"),  # argparse's refusal
    ("--help",),
]


@pytest.mark.skipif(os.environ.get("CAMPAIGN_TEST_FORK") == "0", reason="CAMPAIGN_TEST_FORK=0: no fork server")
def test_a_forked_command_answers_as_a_new_interpreter(ws):
    for args in COMMANDS:
        argv = [sys.executable, "-m", "campaign", *args]
        forked = FORKS.run(argv, ws.env, ws.path, 60)
        assert forked is not None, "the fork server did not take a campaign command"
        proc = subprocess.run(argv, cwd=ws.path, env=ws.env, capture_output=True, text=True, timeout=60)
        assert forked == (proc.returncode, proc.stdout, proc.stderr), args


def test_a_command_in_another_form_or_interpreter_goes_to_a_subprocess(ws):
    assert FORKS.run(["python3", "-m", "campaign", "status"], ws.env, ws.path, 60) is None
    assert FORKS.run([sys.executable, "-c", "pass"], ws.env, ws.path, 60) is None
    assert FORKS.run([sys.executable, "-m", "campaign", "status"], {**ws.env, "PYTHONPATH": "/nowhere"},
                     ws.path, 60) is None
