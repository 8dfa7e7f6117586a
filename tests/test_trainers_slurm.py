"""Every trainer as a 2-rank job on the real local SLURM cluster (GPUs emulated: the
ranks run on CPU with gloo and record it). Marker ``slurm``; skipped when the cluster
of scripts/local-slurm.sh is not up."""

from __future__ import annotations

import json

import pytest

from conftest import Workspace, campaign_id_from
from test_slurm import _cluster_up

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

TRAINERS = {
    "swinv2_upernet": ["trainer=swinv2_upernet", "trainer.params.variant=micro", "dataset=ade20k",
                       "dataset.name=synthetic", "dataset.image_size=128", "dataset.num_workers=0"],
    "frozen_backbone": ["trainer=frozen_backbone", "trainer.params.backbone=squeezenet1_0", "trainer.params.hidden=16",
                        "trainer.params.image_size=32", "dataset=synthetic", "dataset.length=32"],
    "vit": ["trainer=vit", "trainer.params.model=vit_tiny", "dataset=synthetic", "dataset.length=32",
            "experiment.images_per_gpu=2"],
}


@pytest.fixture(scope="module")
def campaigns(tmp_path_factory):
    why = _cluster_up()
    if why:
        pytest.skip(why)
    ws = Workspace(tmp_path_factory.mktemp("trainers-slurm"))
    ids = {}
    for name, overrides in TRAINERS.items():
        res = ws.launch("-m", "platform=a100", "gpus=2", "experiment=smoke", "experiment.base_iterations=4", *overrides)
        assert res.returncode == 0, res.stdout + res.stderr
        ids[name] = campaign_id_from(res.stdout)
    for cid in ids.values():
        ws.campaign("status", cid, "--wait", "--interval", "2", "--timeout", "900", timeout=1000)
    yield ws, ids
    for cid in ids.values():
        ws.campaign("cancel", cid)


@pytest.mark.parametrize("trainer", sorted(TRAINERS))
def test_trainer_runs_as_two_slurm_tasks(campaigns, trainer):
    ws, ids = campaigns
    doc = json.loads(ws.campaign("status", ids[trainer], "--json").stdout)
    (point,) = doc["points"]
    assert point["state"] == "completed", point
    assert "_" in point["job_id"]  # an array task
    rows = ws.query(
        "select r.rank, r.iterations, a.provenance from rank_timing r join attempt a on a.id = r.attempt_id "
        "join point p on p.id = a.point_id where p.campaign_id = ? order by r.rank", ids[trainer])
    assert [r[0] for r in rows] == [0, 1]
    prov = json.loads(rows[0][2])
    assert prov["backend"] == "gloo" and prov["world_size"] == 2
    assert prov["emulated_gpus"] is True and prov["slurm_nodelist"]
