"""``trainer.params.procs_per_node`` (issue #40): the DataParallel study's launch,
``torch.distributed.run`` at "the number of processes spawned per training node [set] to
2", as an option of frozen_backbone's single-process engines (docs/studies/dataparallel.md).

What would catch it wrong: the plan's task count (one process instead of two, or one a
GPU), a DDP point that silently accepts it, a barrier that does not wait for the other
process (a slow peer injected where the study's computation is), and a real local run
whose store lacks the second process or the study's communication rows.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from campaign.common.errors import ConfigError
from campaign.launch.plan import plan_point
from conftest import EMULATED_GPUS, hydra_version_base_kept

REPO = Path(__file__).resolve().parents[1]
PYTHON = str(REPO / ".venv" / "bin" / "python") if (REPO / ".venv" / "bin" / "python").exists() else sys.executable
SLEEP = 0.2  # injected into one process's update: large beside a tiny backbone's CPU iteration on a loaded machine
TINY = ["trainer=frozen_backbone", "trainer.params.backbone=squeezenet1_0", "trainer.params.image_size=32",
        "dataset=synthetic", "dataset.length=16"]


def _planned(*overrides: str):
    from hydra import compose, initialize_config_module

    from campaign.catalogue.config import register

    register()
    with hydra_version_base_kept(), initialize_config_module("campaign_conf", version_base="1.3"):
        cfg = compose("config", overrides=["experiment=smoke", *overrides])
    return plan_point(cfg, 0, list(overrides))


# ---------------------------------------------------------------------------- the launch


def test_two_processes_a_node_each_holding_the_nodes_gpus():
    one = _planned("platform=v100", EMULATED_GPUS, "gpus=4", *TINY, "trainer.params.engine=dataparallel")
    two = _planned("platform=v100", EMULATED_GPUS, "gpus=4", *TINY, "trainer.params.engine=dataparallel",
                   "trainer.params.procs_per_node=2")
    assert (one.resources.tasks_per_node, one.resources.gpus_per_node) == (1, 4)
    assert (two.resources.tasks_per_node, two.resources.gpus_per_node) == (2, 4)  # both see the 4 GPUs
    assert two.resources.cpus_per_task * 2 == one.resources.cpus_per_task  # the node's cores, shared
    assert (two.batch_per_gpu, two.iterations) == (one.batch_per_gpu, one.iterations)  # each: the whole split
    local = _planned("platform=local", "gpus=1", *TINY, "trainer.params.engine=vanilla", "trainer.params.procs_per_node=2")
    assert (local.resources.tasks_per_node, local.resources.cpus_per_task) == (2, 1)  # two local ranks


def test_ddp_refuses_it_in_one_line():
    with pytest.raises(ConfigError) as err:
        _planned("platform=local", "gpus=1", *TINY, "trainer.params.procs_per_node=2")  # engine: ddp by default
    assert str(err.value) == (
        "trainer.params.procs_per_node=2 does nothing with trainer.params.engine=ddp (ddp runs one process a GPU "
        "already); drop it or use trainer.params.engine=dataparallel or vanilla")
    with pytest.raises(ConfigError, match=r"^trainer.params.procs_per_node must be >= 1"):
        _planned("platform=local", "gpus=1", *TINY, "trainer.params.engine=dataparallel",
                 "trainer.params.procs_per_node=0")


# ---------------------------------------------------------------------------- two processes, one barrier


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# One process of the pair, as a script (two plain interpreters start in seconds; mp.spawn
# re-imports this test module and its conftest in each child, several times slower).
PROCESS = """
import sys, time
from pathlib import Path
import torch
import torch.distributed as dist
from trainers import loop
from trainers.dist import DistContext
from trainers.frozen_backbone import FrozenBackboneTrainer
from trainers.instrument import Recorder

rank, port, out, readings = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4:]
torch.set_num_threads(1)
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
ctx = DistContext(rank=rank, world_size=2, local_rank=rank, local_world_size=2, num_nodes=1,
                  device=torch.device("cpu"), backend="gloo", emulated=False, host="test")
for reading, sleep in (r.split(":") for r in readings):  # one trainer after the other, in the same pair
    cfg = {"gpus": 1, "experiment": {}, "dataset": {"name": "synthetic", "num_classes": 10, "length": 16},
           "trainer": {"name": "frozen_backbone", "optimizer": "sgd", "lr": 0.01,
                       "params": {"backbone": "squeezenet1_0", "classifier": "linear", "image_size": 32,
                                  "engine": "dataparallel", "procs_per_node": 2, "study_timing": True,
                                  "procs_split": reading}}}
    trainer = FrozenBackboneTrainer(ctx, cfg, {"batch_per_gpu": 4, "iterations": 3, "warmup": 1, "seed": 0})
    if rank == 1:  # the study's fifth computation step, slow in one process only
        step = trainer.optimizer.step
        trainer.optimizer.step = lambda *a, _step=step, _s=float(sleep), **k: (time.sleep(_s), _step(*a, **k))[1]
    rec = Recorder(torch.device("cpu"), warmup=1)
    loop.train(trainer, rec, 4)
    torch.save({"study": trainer.study.seconds, "losses": [float(x) for x in trainer._losses],
                "epoch": trainer.epoch, "type": type(trainer.model).__name__, "gpu_images": trainer.gpu_images,
                "gpu_ids": trainer.gpu_ids}, Path(out) / f"p{rank}-{reading}.pt")
    dist.barrier()
dist.destroy_process_group()
"""


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> dict[str, tuple[dict, dict]]:
    """Two processes of one node, one GPU (the twin's single-process points), 16 images at a
    batch of 4, run once for both readings (one trainer after the other: each process
    starts and imports torch once): reading -> what each process saved. Literal: process
    1's update slowed by SLEEP; split: no delay."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("torchvision")
    out = tmp_path_factory.mktemp("procs-pair")
    port, env = str(_free_port()), dict(os.environ, PYTHONPATH=os.pathsep.join(
        [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p] + [str(REPO)]))
    readings = {"literal": SLEEP, "split": 0.0}
    procs = [subprocess.Popen([PYTHON, "-c", PROCESS, str(rank), port, str(out),
                               *(f"{r}:{s}" for r, s in readings.items())], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for rank in (0, 1)]
    for p in procs:
        got, _ = p.communicate(timeout=300)
        assert p.returncode == 0, got
    return {r: tuple(torch.load(out / f"p{rank}-{r}.pt", weights_only=False) for rank in (0, 1)) for r in readings}


@pytest.mark.slow
def test_a_slow_process_is_the_others_barrier(pair):
    p0, p1 = pair["literal"]
    assert p0["type"] == p1["type"] == "DataParallel"
    # each read the whole split (16 images in batches of 4: 4 iterations, one epoch) in the same
    # order from the same head: the two models, and their losses, are equal
    assert p0["epoch"] == p1["epoch"] == 0 and p0["losses"] == p1["losses"] and len(p0["losses"]) == 4
    # the literal reading: both drive GPU 0 with the whole batch, so it does 4 + 4 images a step
    assert p0["gpu_ids"] == p1["gpu_ids"] == [0]
    assert [a[0] + b[0] for a, b in zip(p0["gpu_images"], p1["gpu_images"])] == [8] * 4
    for i in range(1, 4):  # after the warm-up: process 0 waits at the barrier for process 1's update
        assert p1["study"]["study.compute"][i] >= SLEEP
        assert p0["study"]["study.comm_barrier"][i] >= SLEEP * 0.5, p0["study"]
    assert sum(p1["study"]["study.comm_barrier"][1:]) < sum(p0["study"]["study.comm_barrier"][1:]) / 2, p1["study"]


@pytest.mark.slow
def test_the_split_reading_gives_each_process_half_the_batch_and_of_the_split(pair):
    """procs_split=split on the same pair: one GPU, which both processes share (fewer GPUs than
    processes), each with half the batch from its own half of the split, so the GPU does one
    process's 4 images a step, and the two models see different images."""
    p0, p1 = pair["split"]
    assert p0["gpu_ids"] == p1["gpu_ids"] == [0]
    assert [a[0] + b[0] for a, b in zip(p0["gpu_images"], p1["gpu_images"])] == [4] * 4
    assert [s[0] for s in p0["gpu_images"]] == [s[0] for s in p1["gpu_images"]] == [2] * 4
    # 8 images each in batches of 2: 4 iterations, one epoch, as the literal reading's 16 in 4
    assert p0["epoch"] == p1["epoch"] == 0 and len(p0["losses"]) == len(p1["losses"]) == 4
    assert p0["losses"] != p1["losses"]  # their own halves: nothing exchanges gradients between them


@pytest.mark.slow
def test_a_local_campaign_runs_two_processes_and_stores_the_study_communication(ws):
    pytest.importorskip("torch")
    pytest.importorskip("torchvision")
    res = ws.launch("platform=local", "name=procs", "gpus=1", *TINY, "trainer.params.classifier=linear",
                    "experiment=smoke", "trainer.params.engine=dataparallel", "trainer.params.procs_per_node=2",
                    "trainer.params.study_timing=true", timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    store = ws.db
    done = ws.campaign("status", "--wait", "--interval", "0.5", "--store", ws.store_url, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    with sqlite3.connect(store) as db:
        (world, provenance), = db.execute("SELECT world_size, provenance FROM attempt")
        ranks = dict(db.execute("SELECT rank, final_loss FROM rank_timing"))
        extra = [json.loads(e) for (e,) in db.execute("SELECT extra FROM rank_timing")]
        barrier = dict(db.execute("SELECT rank, total_s FROM breakdown WHERE phase = 'study.comm_barrier'"))
    assert world == 2 and json.loads(provenance)["backend"] == "gloo"  # two processes, one process group
    assert sorted(ranks) == [0, 1] and ranks[0] == ranks[1]  # both stored; the same model in each
    assert sorted(barrier) == [0, 1] and all(s >= 0 for s in barrier.values())
    assert [e["procs_per_node"] for e in extra] == [2, 2]
    out = ws.path / "breakdown.csv"
    got = ws.campaign("harvest", "procs", "--store", ws.store_url, "--table", "breakdown", "--out", str(out))
    assert got.returncode == 0, got.stdout + got.stderr
    import csv

    with open(out) as fh:
        rows = list(csv.DictReader(fh))
    assert {(r["phase"], r["source"]) for r in rows if r["phase"].startswith("study.")} == {
        ("study.compute", "study"), ("study.comm_barrier", "study")}
