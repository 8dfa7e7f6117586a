"""The DataParallel study's own definitions (trainers/dp_study.py, issue #40): its timing
rows (``study.compute``, ``study.comm_barrier`` in training, ``study.comm_sync`` in
inference) beside campaign's stages, and its stop rule (epochs to a loss threshold,
capped by experiment.epochs), through harvest's breakdown and convergence tables.

Each figure is checked against something that would catch it wrong: an injected sleep
where the study puts it (the update, the forward, a slow peer rank), and the invariant
that the study's two training figures tile the iteration minus its data wait."""

from __future__ import annotations

import json
import socket
import sqlite3
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

from campaign.harvest.convergence import point_rows  # noqa: E402
from conftest import Workspace  # noqa: E402
from dp_ranks import PEER_SLEEP, _cfg, _ctx, _plan, _run, _slow, _two_ranks  # noqa: E402
from trainers.dp_study import ThresholdStop  # noqa: E402
from trainers.frozen_backbone import FrozenBackboneTrainer  # noqa: E402

SLEEP = 0.03  # an injected delay: large beside a tiny backbone's CPU iteration, small for a test
TOL = 0.01  # between two marks on a loaded machine (a third of SLEEP: a misplaced delay still shows)


# ---------------------------------------------------------------------------- the study's timings


@pytest.mark.parametrize("engine", ["ddp", "vanilla"])
def test_training_figures_tile_the_iteration_and_a_slow_update_is_computation(engine):
    trainer = FrozenBackboneTrainer(_ctx(), _cfg(engine, study_timing=True), _plan(4))
    _slow(trainer.optimizer, "step", SLEEP)  # the update is the study's fifth computation step
    rec = _run(trainer, 5)
    study = trainer.study.seconds
    assert len(study["study.compute"]) == len(study["study.comm_barrier"]) == 5
    for row, compute, barrier in zip(rec.rows(), study["study.compute"], study["study.comm_barrier"]):
        # zero_grad .. step + the barrier = the iteration less its data wait (a few laps' microseconds)
        assert abs(compute + barrier - (row["iter_s"] - row["data_s"])) < TOL
        assert compute >= SLEEP
        assert barrier < TOL  # one process: no peer to wait for
    rows = {r["phase"]: r for r in trainer.breakdown_rows()}
    assert rows["study.compute"]["count"] == rows["study.comm_barrier"]["count"] == 4  # the timed window only
    assert rows["study.compute"]["total_s"] == pytest.approx(sum(study["study.compute"][1:]))
    assert "study.comm_sync" not in rows
    assert trainer.summary_extra()["study_timing"] is True
    trainer.close()


def test_off_by_default_no_study_rows():
    trainer = FrozenBackboneTrainer(_ctx(), _cfg("ddp"), _plan(2))
    _run(trainer, 3)
    assert trainer.study is None
    assert not [r for r in trainer.breakdown_rows() if r["phase"].startswith("study.")]
    assert "study_timing" not in trainer.summary_extra()


@pytest.mark.parametrize("engine", ["dataparallel", "vanilla"])
def test_inference_compute_is_the_forward_and_sync_is_apart(engine):
    trainer = FrozenBackboneTrainer(_ctx(), _cfg(engine, mode="inference", study_timing=True), _plan(3))
    _slow(trainer, "_forward", SLEEP)
    rec = _run(trainer, 4)
    study = trainer.study.seconds
    assert set(study) == {"study.compute", "study.comm_sync"}
    for row, compute, sync in zip(rec.rows(), study["study.compute"], study["study.comm_sync"]):
        assert compute >= SLEEP
        assert sync < TOL  # CPU: no device to wait for
        assert abs(compute + sync - (row["iter_s"] - row["data_s"])) < TOL
    rows = {r["phase"]: r for r in trainer.breakdown_rows()}
    assert rows["study.compute"]["count"] == 3 and rows["study.compute"]["mean_s"] >= SLEEP
    trainer.close()


# ---------------------------------------------------------------------------- the stop rule


def test_threshold_stop_decides_on_the_epoch_mean():
    stop = ThresholdStop(_ctx(), 1.5)
    decisions = []
    for epoch, losses in enumerate([(3.0, 1.0), (2.0, 1.2), (1.0, 1.8), (0.1, 0.1)]):  # means 2.0, 1.6, 1.4, 0.1
        for v in losses:
            stop.add(torch.tensor(v))
        decisions.append(stop.epoch_ended(epoch))
    assert decisions == [False, False, True, False]  # an iteration below (1.0) does not stop it: the mean does
    assert stop.epoch_losses == pytest.approx([2.0, 1.6, 1.4, 0.1])
    assert stop.extra(6) == {"stop_rule": "epoch_mean_loss_below_threshold", "stopped": "threshold",
                             "epochs_to_threshold": 3, "iterations_at_stop": 6,
                             "epoch_losses": pytest.approx([2.0, 1.6, 1.4, 0.1])}


@pytest.mark.parametrize("threshold,stopped,iterations", [(100.0, "threshold", 4), (0.0, "cap", 12)])
def test_the_trainer_stops_at_the_epoch_that_reaches_it_else_at_the_cap(threshold, stopped, iterations):
    """16 images in batches of 4: 4 iterations an epoch, a cap of 3 epochs (12)."""
    trainer = FrozenBackboneTrainer(_ctx(), _cfg("ddp", loss_threshold=threshold, stop_at_threshold=True), _plan(11))
    rec = _run(trainer, 12)
    assert rec.iterations_done == iterations
    extra = trainer.summary_extra()
    assert extra["stopped"] == stopped and extra["iterations_at_stop"] == iterations
    assert extra["epochs_to_threshold"] == (1 if stopped == "threshold" else None)
    assert len(extra["epoch_losses"]) == iterations // 4
    losses = [r["loss"] for r in rec.rows()]
    assert extra["epoch_losses"][0] == pytest.approx(sum(losses[:4]) / 4)


def test_stop_at_threshold_is_refused_without_a_threshold_or_in_inference():
    from campaign.common.errors import ConfigError
    from campaign.launch.validate import check_engine

    def config(**params):
        return {"trainer": {"name": "frozen_backbone", "params": params}, "gpus": 1, "nodes": 1,
                "platform": {"name": "local", "device": "cpu"}, "container": {"runtime": "none"}}

    with pytest.raises(ConfigError, match="stop_at_threshold=true needs trainer.params.loss_threshold"):
        check_engine(config(stop_at_threshold=True))
    with pytest.raises(ConfigError, match="mode=inference trains nothing"):
        check_engine(config(stop_at_threshold=True, loss_threshold=1.0, mode="inference", engine="vanilla"))


def test_convergence_rows_take_the_runs_decision_and_show_a_capped_run_as_capped():
    loss = [2.0, 2.0, 1.0, 1.0, 0.5, 0.5]
    secs = [1.0] * 6
    epochs = {0: {"iterations": 2}, 1: {"iterations": 2}, 2: {"iterations": 2}}
    reached = point_rows(loss, secs, epochs, 1.5, windows=6, stop={
        "stopped": "threshold", "epochs_to_threshold": 2, "iterations_at_stop": 4, "loss_threshold": 1.5})
    assert {(r["stopped"], r["to_threshold_epochs"], r["to_threshold_iterations"], r["to_threshold_s"])
            for r in reached} == {("threshold", 2, 4, 4.0)}
    # capped: a window's mean fell below, the epoch means never did (the run's own rule): not reached
    capped = point_rows(loss, secs, epochs, 1.5, windows=6, stop={
        "stopped": "cap", "epochs_to_threshold": None, "iterations_at_stop": 6, "loss_threshold": 1.5})
    assert {(r["stopped"], r["to_threshold_epochs"], r["to_threshold_iterations"]) for r in capped} == {
        ("capped", None, None)}
    # another threshold at harvest (--loss-threshold): the windows decide, the run's word stays
    other = point_rows(loss, secs, epochs, 0.75, windows=6, stop={
        "stopped": "cap", "epochs_to_threshold": None, "iterations_at_stop": 6, "loss_threshold": 1.5})
    assert {(r["stopped"], r["to_threshold_iterations"]) for r in other} == {("capped", 5)}
    assert {r["stopped"] for r in point_rows(loss, secs, epochs, 1.5)} == {None}  # no stop rule ran


# ---------------------------------------------------------------------------- two gloo ranks


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_ranks_a_slow_peer_is_the_barrier_and_they_stop_together(tmp_path):
    import torch.multiprocessing as mp

    mp.spawn(_two_ranks, args=(_free_port(), str(tmp_path)), nprocs=2, join=True)
    r0, r1 = (torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in (0, 1))
    assert r0["votes"] == r1["votes"] == [False, True]
    assert r0["iterations"] == r1["iterations"] == 4  # 16 images, 2 ranks, batches of 2: 4 an epoch
    assert r0["extra"]["stopped"] == r1["extra"]["stopped"] == "threshold"
    assert r0["extra"]["epoch_losses"] == r1["extra"]["epoch_losses"]
    # iteration 0 is warm-up (and DDP's first all-reduce); from 1 on: rank 1 slow in compute,
    # rank 0 waiting at the barrier for it (less its own, faster, compute). Both leave the
    # barrier together, so rank 0's wait is rank 1's delay less what rank 0 did meanwhile: on a
    # loaded machine that is more than a tiny backbone's step, so the bound is half the delay.
    for i in range(1, 4):
        assert r1["study"]["study.compute"][i] >= PEER_SLEEP
        assert r0["study"]["study.comm_barrier"][i] >= PEER_SLEEP * 0.5
        assert r1["study"]["study.comm_barrier"][i] < r0["study"]["study.comm_barrier"][i]
    for r in (r0, r1):
        for row, c, b in zip(r["rows"], r["study"]["study.compute"], r["study"]["study.comm_barrier"]):
            assert abs(c + b - (row["iter_s"] - row["data_s"])) < TOL


# ---------------------------------------------------------------------------- through campaign


def _harvest(cwd: Path, *args: str) -> list[dict]:
    store = f"sqlite:///{cwd / 'res' / 'campaign.db'}"
    out = cwd / "table.csv"
    res = Workspace(cwd).campaign("harvest", "dpdefs", "--store", store, *args, "--out", str(out))
    assert res.returncode == 0, res.stdout + res.stderr
    import csv

    with open(out) as fh:
        return list(csv.DictReader(fh))


@pytest.mark.slow
def test_a_local_campaign_stores_both_and_harvest_shows_them(tmp_path):
    """gpus=1, 16 synthetic images in batches of 4, a cap of 3 epochs: a threshold every
    loss is below stops after epoch 1; 0 (cross-entropy is never below) runs to the cap."""
    ws = Workspace(tmp_path)  # campaign's commands forked from the suite's preloaded server (tests/forkserver.py)
    res = ws.launch("-m", "platform=local", f"results_dir={tmp_path / 'res'}", "name=dpdefs", "gpus=1",
                    "trainer=frozen_backbone", "dataset=synthetic", "dataset.length=16",
                    "trainer.params.backbone=squeezenet1_0", "trainer.params.classifier=mlp",
                    "trainer.params.hidden=16",
                    "trainer.params.image_size=32", "experiment=smoke", "experiment.epochs=3",
                    "trainer.params.study_timing=true", "trainer.params.stop_at_threshold=true",
                    "trainer.params.loss_threshold=100,0", timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    store = tmp_path / "res" / "campaign.db"
    done = ws.campaign("status", "--wait", "--interval", "2", "--store", f"sqlite:///{store}", timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    with sqlite3.connect(store) as db:
        counts = {json.loads(c)["trainer"]["params"]["loss_threshold"]: n for c, n in db.execute(
            "SELECT p.config, COUNT(i.iter) FROM iteration i JOIN attempt a ON a.id = i.attempt_id "
            "JOIN point p ON p.id = a.point_id GROUP BY p.id")}
    assert counts == {100: 4, 0: 12}

    conv = [r for r in _harvest(tmp_path, "--table", "convergence") if r["unit"] == "epoch"]
    by = {float(r["loss_threshold"]): r for r in conv}
    assert by[100.0]["stopped"] == "threshold" and by[100.0]["to_threshold_epochs"] == "1"
    assert by[100.0]["to_threshold_iterations"] == "4"
    assert by[0.0]["stopped"] == "capped" and by[0.0]["to_threshold_epochs"] == ""
    assert sorted(int(r["at"]) for r in conv if float(r["loss_threshold"]) == 0.0) == [0, 1, 2]

    rows = _harvest(tmp_path, "--table", "breakdown")
    study = {(r["phase"], r["source"]) for r in rows if r["phase"].startswith("study.")}
    assert study == {("study.compute", "study"), ("study.comm_barrier", "study")}
    assert all(float(r["seconds"]) >= 0 for r in rows if r["source"] == "study")
