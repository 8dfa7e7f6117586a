"""The launch against the real local SLURM (scripts/local-slurm.sh): what the scheduler
must offer is checked before anything is stored (exit 2, one line), and a campaign none of
whose points reached SLURM is not left behind as if it ran. (A waiting launch returns the
jobs' real outcome: tests/test_slurm.py's site launches two that wait, exit 0 and exit 3.)"""

from __future__ import annotations

import os
import sys

import pytest

from conftest import EMULATED_GPUS

pytestmark = pytest.mark.slurm
ONE_CPU = ["platform.cpus_per_task=1", "experiment=smoke"]
# Where sinfo gives no answer (not on PATH, the cluster down, another partition) nothing says the
# test SLURM's GPUs are emulated (their nodes' feature emulated_gpu): the manual override, so
# that the refusal under test is not the V100's compute capability (campaign/launch/arch.py).
NOT_ASKED = [EMULATED_GPUS]
SMALL = ["trainer.params.width=4", "trainer.params.depth=2", "dataset.image_size=8"]


@pytest.fixture
def slurm_ws(ws):
    from test_slurm import _cluster_up

    why = _cluster_up()
    if why:
        pytest.skip(why)
    ws.env["SLURM_CONF"] = os.environ.get("SLURM_CONF", "/tmp/campaign-slurm/etc/slurm.conf")
    return ws


def _refused(res) -> str:
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr.startswith("error: ") and res.stderr.count("\n") == 1 and "Traceback" not in res.stderr
    return res.stderr


def test_no_sbatch_on_path_is_refused_before_anything_is_stored(slurm_ws, tmp_path):
    bin_dir = tmp_path / "bin"  # this Python, without SLURM's client
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    slurm_ws.env["PATH"] = f"{bin_dir}:/nonexistent"
    err = _refused(slurm_ws.launch("-m", "platform=v100", "gpus=1,2", *ONE_CPU, *NOT_ASKED, *SMALL))
    assert err.startswith("error: sbatch not found on PATH: platform v100 submits to SLURM; load SLURM")
    assert not slurm_ws.db.exists()


def test_slurm_down_is_refused_before_anything_is_stored(slurm_ws, tmp_path):
    bad = tmp_path / "slurm.conf"
    bad.write_text("ClusterName=nowhere\nSlurmctldHost=localhost(127.0.0.1)\nSlurmctldPort=1\n")
    slurm_ws.env["SLURM_CONF"] = str(bad)
    err = _refused(slurm_ws.launch("-m", "platform=v100", "gpus=1", *ONE_CPU, *NOT_ASKED, *SMALL, timeout=240))
    assert err.startswith("error: SLURM does not answer (sinfo: ")
    assert "nothing was submitted or stored" in err
    assert not slurm_ws.db.exists()


def test_an_unknown_partition_is_refused_with_the_available_ones(slurm_ws):
    err = _refused(slurm_ws.launch("-m", "platform=v100", "platform.partition=nosuch", *ONE_CPU, *NOT_ASKED, *SMALL))
    assert "platform v100: SLURM has no partition 'nosuch'; available: a100, a100_nvlink, v100" in err
    assert not slurm_ws.db.exists()


def test_another_hydra_app_runs_its_points_on_slurm_through_the_campaign_launcher(slurm_ws, tmp_path):
    app = tmp_path / "app.py"
    app.write_text("import os\nimport hydra\n\n@hydra.main(version_base=None, config_path=None)\n"
                   "def main(cfg):\n    with open(os.path.join(os.environ['OUT_DIR'], f'x{cfg.x}'), 'w') as f:\n"
                   "        f.write(os.environ.get('SLURM_JOB_PARTITION', 'none'))\n\n"
                   "if __name__ == '__main__':\n    main()\n")
    out = tmp_path / "out"
    out.mkdir()
    slurm_ws.env["OUT_DIR"] = str(out)
    res = slurm_ws.run(sys.executable, str(app), "-m", "hydra/launcher=campaign", "hydra.launcher.executor=slurm",
                       "hydra.launcher.partition=v100", "hydra.launcher.timeout_min=5", "+x=1,2",
                       f"hydra.sweep.dir={tmp_path / 'sweep'}", timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    assert sorted(p.name for p in out.iterdir()) == ["x1", "x2"]
    assert {p.read_text() for p in out.iterdir()} == {"v100"}
