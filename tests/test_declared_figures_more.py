"""``campaign figures`` (issue #46), the rest of the declared figures worked out by hand: the
DataParallel study's loss at each iteration (Fig 1b), its loss per epoch and the epochs until
the loss fell below its threshold (Figs 2a, 3a, 5b), its computation and communication per
iteration against batch, backbone and hidden size (Figs 2b, 3b, 5a) and its inference
synchronize (Fig 4b); the ViT study's training loss per epoch beside the test accuracy after
each epoch (Fig 11). Crafted stores shaped as each twin's grid (tests/test_declared_figures.py
builds them); every expected number is computed HERE from the study's definition and the rows
written, never by campaign's code, and the CSV behind each figure is compared within 1e-9
relative. The figures are drawn (PNG) once per study: their legends name what varies."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_declared_figures import DP_GRID, REL, _csv, _dp_points, _dp_seconds, _num, _run, _store, _vit_points

# ------------------------------------------------------------------ the DataParallel study

THRESHOLD = 0.6  # trainer.params.loss_threshold of every training point
EPOCH_ITS = 2  # _dp_points' epochs: epoch_0 and epoch_1 of 2 iterations each (4 iterations)
# iterations of loss a point holds: Fig 1b's 1- and 2-GPU points run 24 (more than the 20 windows
# harvest's convergence table cuts a run into: Fig 1b is every iteration), the others 4
LOSSES = {0: 24, 1: 24}
# grid index -> the loss of rank r at iteration k is BASE[i] - 0.1 k + 0.02 r
BASE = {0: 1.0, 1: 0.82, 2: 0.9, 3: 0.6, 4: 1.2, 5: 0.75}
# grid index -> the trainer's stop rule as rank_timing.extra holds it (none: the iterations decide)
STOP = {1: {"stopped": "threshold", "epochs_to_threshold": 2, "iterations_at_stop": 4},
        4: {"stopped": "cap", "epochs_to_threshold": None, "iterations_at_stop": 4}}


def _loss(i: int, rank: int, k: int) -> float:
    return BASE[i] - 0.1 * k + 0.02 * rank


def _points() -> list[dict]:
    points = []
    for p in _dp_points():
        i, n = p["idx"], p["gpus"]
        if p["losses"] is None:  # inference: no loss
            points.append(p)
            continue
        config = dict(p["config"], trainer={"params": {**p["config"]["trainer"]["params"],
                                                       "loss_threshold": THRESHOLD}})
        extra = {"stop_rule": "epoch_mean_loss_below_threshold", "loss_threshold": THRESHOLD, **STOP[i]} \
            if i in STOP else None
        points.append(dict(p, config=config, losses={r: [_loss(i, r, k) for k in range(LOSSES.get(i, 4))] for r in range(n)},
                           ranks=[dict(rt, extra=extra if r == 0 else None) for r, rt in enumerate(p["ranks"])]))
    return points


def _mean_loss(i: int, k: int) -> float:
    """The study's loss at iteration k: the mean over the point's ranks."""
    n = _dp_points()[i]["gpus"]
    return sum(_loss(i, r, k) for r in range(n)) / n


def _epoch_loss(i: int, e: int) -> float:
    """The training loss of epoch e: the mean over its iterations of the mean over ranks."""
    return sum(_mean_loss(i, k) for k in range(e * EPOCH_ITS, (e + 1) * EPOCH_ITS)) / EPOCH_ITS


def _epochs_to_threshold(i: int):
    """The epochs run until the loss fell below the threshold: the stop rule's (the first epoch
    whose mean fell below), else the epoch of the first iteration whose loss did; None: never."""
    if i in STOP:
        e = next((e for e in (0, 1) if _epoch_loss(i, e) < THRESHOLD), None)
        return None if e is None or STOP[i]["stopped"] == "cap" else e + 1
    k = next((k for k in range(4) if _mean_loss(i, k) < THRESHOLD), None)
    return None if k is None else k // EPOCH_ITS + 1


def _i(**change) -> int:
    return DP_GRID.index(change)


@pytest.fixture(scope="module")
def dp_out(tmp_path_factory):
    from campaign.cli import main

    tmp = tmp_path_factory.mktemp("dp")
    cid = "20260301-000000-dp02-dp-twin"
    url = _store(tmp, cid, _points())
    assert main(["figures", cid, "--store", url, "--out", str(tmp / "out"), "--formats", "png"]) == 0
    return tmp / "out"


def test_dataparallel_fig_1b_is_the_loss_at_each_iteration_mean_over_ranks_by_hand(dp_out):
    rows = _csv(dp_out / "fig01b.csv")
    assert {r["unit"] for r in rows} == {"window"}
    got = {(int(r["gpus"]), int(r["at"])): _num(r, "loss") for r in rows}
    # Fig 1b: the default point at 1, 2 and 4 GPUs, every iteration its own row (warm-up counted)
    want = {(n, k): _mean_loss(i, k) for i, n in ((_i(gpus=1), 1), (_i(gpus=2), 2), (_i(gpus=4), 4))
            for k in range(LOSSES.get(i, 4))}
    assert len(want) == 24 + 24 + 4
    assert want[(4, 0)] == pytest.approx(0.93) and want[(2, 3)] == pytest.approx(0.53)
    assert want[(1, 23)] == pytest.approx(1.0 - 2.3)
    assert got == pytest.approx(want, rel=REL)
    assert all(int(r["iterations"]) == int(r["at"]) + 1 for r in rows)
    assert (dp_out / "fig01b.png").is_file()


@pytest.mark.parametrize("number, column, values", [
    ("fig02a", "experiment.global_batch", {"16": {"gpus": 2}, "8": {"experiment.global_batch": 8}}),
    ("fig03a", "trainer.params.backbone", {"resnet18": {"gpus": 2},
                                           "squeezenet1_0": {"trainer.params.backbone": "squeezenet1_0"}}),
    ("fig05b", "trainer.params.hidden", {"64": {"gpus": 2}, "32": {"trainer.params.hidden": 32}}),
])
def test_dataparallel_loss_per_epoch_and_epochs_to_threshold_by_hand(dp_out, number, column, values):
    rows = _csv(dp_out / f"{number}.csv")
    assert {r["unit"] for r in rows} == {"epoch"}
    # the series is named by what varies, a column of its own (never the point's index)
    assert {r[column] for r in rows} == set(values)
    got = {(r[column], int(r["epoch"])): _num(r, "loss") for r in rows}
    want = {(v, e): _epoch_loss(_i(**change), e) for v, change in values.items() for e in (0, 1)}
    assert got == pytest.approx(want, rel=REL)
    reached = {r[column]: (int(r["to_threshold_epochs"]) if r["to_threshold_epochs"] else None) for r in rows}
    assert reached == {v: _epochs_to_threshold(_i(**change)) for v, change in values.items()}
    assert {r[column]: float(r["loss_threshold"]) for r in rows} == {v: THRESHOLD for v in values}


def test_dataparallel_epochs_to_threshold_cover_each_way_a_run_ends():
    # the default (stop rule: epoch 1's mean 0.58 < 0.6), batch 8 (its iteration 1: 0.51), hidden 32
    # (its iteration 2: 0.56, epoch 1) and SqueezeNet (never below: capped)
    assert [_epochs_to_threshold(_i(**c)) for c in ({"gpus": 2}, {"experiment.global_batch": 8},
                                                     {"trainer.params.hidden": 32},
                                                     {"trainer.params.backbone": "squeezenet1_0"})] == [2, 1, 2, None]
    assert _epoch_loss(_i(gpus=2), 0) == pytest.approx(0.78) and _epoch_loss(_i(gpus=2), 1) == pytest.approx(0.58)


@pytest.mark.parametrize("number, column, values", [
    ("fig02b", "experiment.global_batch", {"16": {"gpus": 2}, "8": {"experiment.global_batch": 8}}),
    ("fig03b", "trainer.params.backbone", {"resnet18": {"gpus": 2},
                                           "squeezenet1_0": {"trainer.params.backbone": "squeezenet1_0"}}),
    ("fig05a", "trainer.params.hidden", {"64": {"gpus": 2}, "32": {"trainer.params.hidden": 32}}),
])
def test_dataparallel_computation_and_communication_per_x_by_hand(dp_out, number, column, values):
    rows = _csv(dp_out / f"{number}.csv")
    assert {r["phase"] for r in rows} == {"study.compute", "study.comm_barrier"}  # the study's, never campaign's
    got = {(r[column], r["phase"]): _num(r, "per_iteration_ms") for r in rows}
    # each phase's mean seconds per iteration, the mean over the point's 2 ranks, in ms
    want = {(v, phase): 1000 * sum(_dp_seconds(_i(**change), r)[k] for r in range(2)) / 2
            for v, change in values.items() for phase, k in (("study.compute", 0), ("study.comm_barrier", 1))}
    assert got == pytest.approx(want, rel=REL)
    assert all(r["gpus"] == "2" for r in rows)


def test_dataparallel_fig_4b_is_the_inference_synchronize_per_engine_and_batch_by_hand(dp_out):
    rows = _csv(dp_out / "fig04b.csv")
    assert {r["phase"] for r in rows} == {"study.comm_sync"}
    got = {(r["trainer.params.engine"], int(r["experiment.global_batch"])): _num(r, "per_iteration_ms") for r in rows}
    want = {(e, b): 1000 * _dp_seconds(_i(**{"gpus": 1, "trainer.params.mode": "inference",
                                             "trainer.params.engine": e, "experiment.global_batch": b}), 0)[1]
            for e in ("dataparallel", "vanilla") for b in (8, 16)}
    assert got == pytest.approx(want, rel=REL)
    assert {p.name for p in dp_out.glob("fig0[1-5]*.png")} >= {"fig01b.png", "fig02a.png", "fig02b.png", "fig04b.png"}


# ------------------------------------------------------------------ the ViT study: Fig 11

FIG11 = ("vit_strong", "cifar10", 8)  # the twin's strong scaling of CIFAR-10 at 8 images per GPU
ITS = 24  # each run's iterations: _vit_points' epoch rows hold 12 each (epoch_0, epoch_1)


def _vit_loss(n: int, rank: int, k: int) -> float:
    return 2.0 - 0.05 * k + 0.1 * rank - 0.01 * n


def test_vit_fig_11_is_training_loss_per_epoch_beside_test_accuracy_by_hand(tmp_path, capsys):
    mine = [p for p in _vit_points() if (p["experiment"], p["dataset"], p["batch_per_gpu"]) == FIG11]
    points = [dict(p, idx=i, losses={r: [_vit_loss(p["gpus"], r, k) for k in range(ITS)] for r in range(p["gpus"])})
              for i, p in enumerate(mine)]
    cid = "20260301-000000-vit2-vit-twin"
    url = _store(tmp_path, cid, points)
    index = _run(url, cid, tmp_path / "out", capsys, "--formats", "png")
    assert {e["number"]: e["status"] for e in index["items"]}["fig11"] == "made"
    rows = _csv(tmp_path / "out" / "fig11.csv")
    assert {r["unit"] for r in rows} == {"epoch"} and {r["point_dataset"] for r in rows} == {"cifar10"}
    # the training loss of epoch e: its 12 iterations' mean of the mean over ranks
    want = {(n, e): sum(sum(_vit_loss(n, r, k) for r in range(n)) / n for k in range(12 * e, 12 * e + 12)) / 12
            for n in (1, 2) for e in (0, 1)}
    assert want[(1, 0)] == pytest.approx(2.0 - 0.05 * 5.5 - 0.01)
    assert {(int(r["gpus"]), int(r["epoch"])): _num(r, "loss") for r in rows} == pytest.approx(want, rel=REL)
    # the test accuracy after each epoch, as evaluated (_vit_points: 0.2 + 0.01 N, then 0.3 + 0.01 N)
    assert {(int(r["gpus"]), int(r["epoch"])): _num(r, "test_accuracy") for r in rows} == pytest.approx(
        {(n, e): (0.2, 0.3)[e] + 0.01 * n for n in (1, 2) for e in (0, 1)}, rel=REL)
    assert Path(tmp_path / "out" / "fig11.png").is_file()
