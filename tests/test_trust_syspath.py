"""The folder one launches from is not an import path: ``python -m campaign.launch`` from a
shared folder imports nothing planted there (campaign/__init__.py; docs/security.md)."""

from __future__ import annotations

import os
import subprocess
import sys


def test_python_m_launch_does_not_import_a_module_planted_in_the_working_folder(tmp_path):
    marker = tmp_path / "ran"
    for name in ("submitit", "hydra", "omegaconf", "sqlalchemy"):
        (tmp_path / f"{name}.py").write_text(f"open({str(marker)!r}, 'a').write({name!r})\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CAMPAIGN_", "PYTHON"))}
    proc = subprocess.run([sys.executable, "-m", "campaign.launch", "--help"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert not marker.exists(), marker.read_text()
    # the check is real: with the working folder on the path, the plant runs
    subprocess.run([sys.executable, "-c", "import submitit"], cwd=tmp_path, env={**env, "PYTHONPATH": "."},
                   capture_output=True, text=True, timeout=60)
    assert marker.exists()
