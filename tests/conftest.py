"""Shared fixtures: run the real CLI in a subprocess, in a fresh folder, on a fresh store."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

# Small, fast settings for the synthetic trainer on this 2-core machine.
TINY = [
    "experiment.base_iterations=8",
    "experiment.warmup_iterations=1",
    "trainer.params.width=4",
    "trainer.params.depth=2",
    "dataset.image_size=8",
]


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


class Workspace:
    """A folder with its own results dir and store; runs commands as a user would."""

    def __init__(self, path: Path):
        self.path = path
        self.results = path / "results"
        self.store_url = f"sqlite:///{self.results}/campaign.db"
        # SLURM_CONF says which cluster (scripts/local-slurm.sh env): not a job's setting
        self.env = {k: v for k, v in os.environ.items()
                    if k == "SLURM_CONF" or not k.startswith(("SLURM_", "SBATCH_", "CAMPAIGN_"))}
        self.env["CAMPAIGN_RESULTS"] = str(self.results)
        # Local jobs take turns through a machine-wide lock (campaign/backends/local.py);
        # a test's jobs take turns with that test's own, not with whatever else runs here.
        self.env["CAMPAIGN_LOCK_DIR"] = str(path / "lock")

    def run(self, *argv: str, timeout: float = 300) -> Result:
        proc = subprocess.run(list(argv), cwd=self.path, env=self.env, capture_output=True, text=True, timeout=timeout)
        return Result(proc.returncode, proc.stdout, proc.stderr)

    def launch(self, *overrides: str, timeout: float = 120) -> Result:
        return self.run(sys.executable, "-m", "campaign.launch", *overrides, timeout=timeout)

    def campaign(self, *args: str, timeout: float = 300) -> Result:
        return self.run(sys.executable, "-m", "campaign", *args, timeout=timeout)

    @property
    def db(self) -> Path:
        return self.results / "campaign.db"

    def query(self, sql: str, *params):
        import sqlite3

        con = sqlite3.connect(self.db)
        try:
            return con.execute(sql, params).fetchall()
        finally:
            con.close()


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    return Workspace(tmp_path)


@functools.lru_cache(maxsize=None)
def _composed_point(*overrides: str) -> str:
    from hydra import compose, initialize_config_module

    from campaign.config import register
    from campaign.launch.plan import plan_point

    register()
    with initialize_config_module("campaign_conf", version_base="1.3"):
        cfg = compose("config", overrides=list(overrides))
    return json.dumps(plan_point(cfg, 0, []).config)


def point_config(*overrides: str) -> dict:
    """A point's resolved config as a launch stores it (``experiment=smoke`` with TINY,
    then ``overrides``): what ``campaign resume`` plans again from a store filled by hand."""
    return json.loads(_composed_point("experiment=smoke", *TINY, *overrides))


def campaign_id_from(stdout: str) -> str:
    for line in stdout.splitlines():
        if line.startswith("campaign "):
            return line.split()[1].rstrip(":")
    raise AssertionError(f"no campaign id in: {stdout}")


def until(pred, timeout: float, what: str, every: float = 0.5):
    """``pred()``'s first truthy value, asked every ``every`` seconds for up to
    ``timeout``; AssertionError naming ``what`` when it never comes."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = pred()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")
