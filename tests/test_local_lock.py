"""The local backend's lock is machine-wide (one per user and machine, not per results
folder): two campaigns with different results folders queue instead of sharing the
cores and skewing each other's timings."""

from __future__ import annotations

import os
import stat
import sys

import pytest

from campaign.backends.local import LOCK_FILE, exclusive_setup, lock_path
from conftest import Workspace, campaign_id_from

SLOW_POINT = ["trainer=sleep", "gpus=1", "experiment.images_per_gpu=1", "experiment.iterations=40",
              "experiment.warmup_iterations=1", "trainer.params.a_s=0.05", "trainer.params.c_s=0.0"]  # ~2 s of sleeps


def test_lock_is_one_private_file_per_user_and_machine(tmp_path, monkeypatch):
    monkeypatch.delenv("CAMPAIGN_LOCK_DIR", raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    lock = lock_path()
    assert lock == tmp_path / "run" / "campaign" / LOCK_FILE
    assert stat.S_IMODE(os.stat(lock.parent).st_mode) == 0o700 and stat.S_IMODE(os.stat(lock).st_mode) == 0o600
    assert exclusive_setup() == [f"exec 9>>{lock}", "flock 9"]  # the same line whatever the results folder
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    assert lock_path() == lock_path() and str(lock_path()).startswith(f"/tmp/campaign-{os.getuid()}/")
    # a lock folder others can write is refused, with the fix
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    os.chmod(shared, 0o777)
    monkeypatch.setenv("CAMPAIGN_LOCK_DIR", str(shared))
    with pytest.raises(OSError, match=r"not a private folder of this user .* set CAMPAIGN_LOCK_DIR"):
        lock_path()


@pytest.mark.slow
def test_two_campaigns_in_different_results_folders_queue(tmp_path):
    a, b = Workspace(tmp_path / "a"), Workspace(tmp_path / "b")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    b.env["CAMPAIGN_LOCK_DIR"] = a.env["CAMPAIGN_LOCK_DIR"]  # one machine: one lock
    first = a.launch("-m", *SLOW_POINT)
    second = b.launch("-m", *SLOW_POINT)
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    for ws, res in ((a, first), (b, second)):
        done = ws.campaign("status", campaign_id_from(res.stdout), "--wait", "--interval", "0.5", "--timeout", "300",
                           timeout=330)
        assert done.returncode == 0, done.stdout + done.stderr
    (a0, a1), = a.query("SELECT started_at, ended_at FROM attempt")
    (b0, b1), = b.query("SELECT started_at, ended_at FROM attempt")
    # one ran after the other: their attempts never overlapped
    assert a1 <= b0 or b1 <= a0, ((a0, a1), (b0, b1))
    assert a.results != b.results and sys.platform.startswith("linux")
