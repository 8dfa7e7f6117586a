"""Every engine of every trainer as 1- and 2-GPU jobs on the real local SLURM cluster
(GPUs emulated: the ranks run on CPU with gloo and record it), and harvest showing
their breakdown rows. Marker ``slurm``; skipped when the cluster of
scripts/local-slurm.sh is not up. (trainer=swinv2_upernet at 1 and 2 GPUs on SLURM:
tests/test_study_small_slurm.py, the reference study's reduced twin; trainer=vit under DDP:
tests/test_study_twins_slurm.py, the ViT study's; trainer=synthetic at 1, 2 and 4 GPUs:
tests/test_slurm.py's sweep; DeepSpeed's 2-rank job: tests/test_internode.py's, over two nodes.)"""

from __future__ import annotations

import csv
import importlib.util
import io
import json

import pytest

from conftest import Workspace, campaign_id_from
from test_slurm import _cluster_up

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

FROZEN = ["trainer=frozen_backbone", "trainer.params.backbone=squeezenet1_0", "trainer.params.classifier=mlp",
          "trainer.params.hidden=16",
          "trainer.params.image_size=32", "dataset=synthetic", "dataset.length=32"]
VIT = ["trainer=vit", "trainer.params.model=vit_tiny", "dataset=synthetic", "dataset.length=32",
       "experiment.images_per_gpu=2"]
# campaign -> (overrides, engine or None, phases harvest must show for it)
CAMPAIGNS = {
    "frozen_backbone.ddp": (FROZEN + ["trainer.params.engine=ddp"], "ddp", {"ddp.forward", "ddp.backward"}),
    "frozen_backbone.dataparallel": (FROZEN + ["trainer.params.engine=dataparallel"], "dataparallel",
                                     {"dataparallel.scatter", "dataparallel.parallel_apply", "dataparallel.gather"}),
    "frozen_backbone.vanilla": (FROZEN + ["trainer.params.engine=vanilla"], "vanilla",
                                {"vanilla.replicate", "vanilla.parallel_apply", "vanilla.reduce_gradients"}),
    # run here no more (their twins' tests run them on SLURM), kept for tests/test_internode.py
    "swinv2_upernet": (["trainer=swinv2_upernet", "trainer.params.variant=micro", "dataset=ade20k",
                        "dataset.name=synthetic", "dataset.image_size=128", "dataset.num_workers=0"], None,
                       {"forward", "backward", "step"}),
    "vit.ddp": (VIT + ["trainer.params.engine=ddp"], "ddp", {"forward", "backward", "step"}),
    "vit.deepspeed": (VIT + ["trainer.params.engine=deepspeed"], "deepspeed",
                      {"deepspeed.fwd", "deepspeed.bwd", "deepspeed.bwd_allreduce", "deepspeed.step"}),
}
HAS_DEEPSPEED = importlib.util.find_spec("deepspeed") is not None


ELSEWHERE = ("swinv2_upernet", "vit.ddp", "frozen_backbone.ddp")  # on SLURM in the studies' twins (conftest.study_twins)
# The GPU counts a campaign runs at here, where not 1 and 2: DeepSpeed's 2-rank job (and its
# timed gradient all-reduce) is tests/test_internode.py's, its two ranks on two nodes.
GPUS = {"vit.deepspeed": (1,)}


def _gpus(name: str) -> tuple[int, ...]:
    return GPUS.get(name, (1, 2))


def _wanted() -> dict:
    return {k: v for k, v in CAMPAIGNS.items() if k not in ELSEWHERE and (HAS_DEEPSPEED or v[1] != "deepspeed")}


@pytest.fixture(scope="module")
def campaigns(tmp_path_factory):
    why = _cluster_up()
    if why:
        pytest.skip(why)
    ws = Workspace(tmp_path_factory.mktemp("trainers-slurm"))
    ids = {}
    for name, (overrides, _, _) in _wanted().items():
        res = ws.launch("-m", "platform=a100", f"gpus={','.join(map(str, _gpus(name)))}", "experiment=smoke",
                        "experiment.base_iterations=4", *overrides)
        assert res.returncode == 0, res.stdout + res.stderr
        ids[name] = campaign_id_from(res.stdout)
    for cid in ids.values():
        ws.campaign("status", cid, "--wait", "--interval", "2", "--timeout", "900", timeout=1000)
    yield ws, ids
    for cid in ids.values():
        ws.campaign("cancel", cid)


@pytest.mark.parametrize("name", sorted(set(CAMPAIGNS) - set(ELSEWHERE)))
def test_engine_runs_as_slurm_jobs_and_harvest_shows_its_phases(campaigns, name):
    overrides, engine, phases = CAMPAIGNS[name]
    if engine == "deepspeed" and not HAS_DEEPSPEED:
        pytest.skip("DeepSpeed is not installed")
    ws, ids = campaigns
    counts = _gpus(name)
    doc = json.loads(ws.campaign("status", ids[name], "--json").stdout)
    assert sorted(p["gpus"] for p in doc["points"]) == list(counts)
    for point in doc["points"]:
        assert point["state"] == "completed", point
        assert "_" in point["job_id"]  # an array task
    rows = ws.query(
        "select p.gpus, r.rank, r.iterations, a.provenance from rank_timing r join attempt a on a.id = r.attempt_id "
        "join point p on p.id = a.point_id where p.campaign_id = ? order by p.gpus, r.rank", ids[name])
    single_process = engine in ("dataparallel", "vanilla")  # one task drives all the job's GPUs
    assert [(g, r) for g, r, _, _ in rows] == [(g, r) for g in counts for r in range(1 if single_process else g)]
    assert all(it > 0 for _, _, it, _ in rows)
    for gpus, rank, _, prov in rows:
        prov = json.loads(prov)
        assert prov["emulated_gpus"] is True and prov["slurm_nodelist"]
        assert prov["world_size"] == (1 if single_process else gpus)

    # harvest shows the engine's computation/communication breakdown at each GPU count
    out = ws.campaign("harvest", ids[name], "--table", "breakdown", "--to", "csv")
    assert out.returncode == 0, out.stdout + out.stderr
    table = list(csv.DictReader(io.StringIO(out.stdout)))
    for gpus in counts:
        seen = {r["phase"] for r in table if int(r["gpus"]) == gpus}
        assert phases <= seen, (gpus, sorted(seen))
        if gpus == 2 and engine in (None, "ddp", "deepspeed"):  # the timed gradient all-reduce of 2 ranks
            assert "comm_exposed" in seen, sorted(seen)
