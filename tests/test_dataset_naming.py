"""Status and harvest name each series' dataset and crop (issue #23), in the dry run's words
(campaign.catalogue.dataset_label): two datasets in one campaign are two series, and a
study's dataset without its root is worded as the synthetic stand-in it is."""

from __future__ import annotations

import pytest
from sqlalchemy import insert, select

from campaign.catalogue.dataset_label import dataset_label
from campaign.store import open_store
from campaign_sql.schema import attempt, rank_timing

ADE = {"name": "ade20k", "root": "/data/ade", "image_size": 512, "channels": 3, "num_classes": 150}
STAND_IN = {**ADE, "name": "synthetic", "root": None}  # reference_dataset's: the study's shapes, generated
CIFAR = {"name": "cifar10", "root": "/data/c10", "image_size": 32, "channels": 3, "num_classes": 10}
MNIST_STAND_IN = {"name": "synthetic", "image_size": 28, "channels": 1, "num_classes": 10}


def _config(trainer: str, dataset: dict) -> dict:
    return {"trainer": {"name": trainer}, "dataset": dict(dataset)}


def test_a_point_s_dataset_is_worded_with_its_crop_and_a_stand_in_with_its_study():
    assert dataset_label(_config("swinv2_upernet", ADE)) == "ade20k 512px 150 classes"
    assert dataset_label(_config("swinv2_upernet", STAND_IN)) == "synthetic 512px 150 classes (ade20k's shapes)"
    assert dataset_label(_config("swinv2_upernet", STAND_IN), why=True) == \
        "synthetic 512px 150 classes (ade20k's shapes, no dataset.root)"
    assert dataset_label(_config("frozen_backbone", MNIST_STAND_IN)) == \
        "synthetic 28px 1-channel 10 classes (mnist's shapes)"
    # a dataset the point named is its own, not a stand-in (trainer=synthetic has no study)
    assert dataset_label(_config("swinv2_upernet", STAND_IN), ["dataset=synthetic"]) == "synthetic 512px 150 classes"
    assert dataset_label(_config("synthetic", {"name": "synthetic", "image_size": 32, "num_classes": 10})) == \
        "synthetic 32px 10 classes"
    # a store written elsewhere: an unknown trainer has no study; a bare section its name
    assert dataset_label(_config("no_such_trainer", STAND_IN)) == "synthetic 512px 150 classes"
    assert dataset_label({"trainer": {"name": "synthetic"}, "dataset": {}}) == "synthetic"


def _status_point(idx: int, trainer: str, dataset: dict, overrides=()) -> dict:
    return {"idx": idx, "platform": "local", "gpus": 1, "nodes": 1, "trainer": trainer, "experiment": "smoke",
            "repeat": 0, "state": "completed", "config": _config(trainer, dataset), "overrides": list(overrides)}


def test_status_names_a_shared_dataset_above_the_table_and_differing_ones_in_a_column():
    from campaign.observe.status import point_view, render

    camp = {"id": "20260101-000000-aaaa", "name": None}
    shared = [point_view(_status_point(i, "swinv2_upernet", STAND_IN), 0.0) for i in range(2)]
    head, table = render(camp, shared, now=0.0).split("\n", 2)[:2]
    assert head == ("campaign 20260101-000000-aaaa: trainer=swinv2_upernet experiment=smoke "
                    "dataset=synthetic 512px 150 classes (ade20k's shapes)")
    assert "dataset" not in table

    mixed = [point_view(_status_point(0, "swinv2_upernet", STAND_IN), 0.0),
             point_view(_status_point(1, "swinv2_upernet", {**ADE, "image_size": 640}), 0.0)]
    lines = render(camp, mixed, now=0.0).splitlines()
    assert lines[0] == "campaign 20260101-000000-aaaa: trainer=swinv2_upernet experiment=smoke"
    assert lines[1].split()[:4] == ["#", "platform", "gpus", "dataset"]
    assert "synthetic 512px 150 classes (ade20k's shapes)" in lines[3]
    assert "ade20k 640px 150 classes" in lines[4]
    assert [v["dataset"] for v in mixed] == ["synthetic 512px 150 classes (ade20k's shapes)", "ade20k 640px 150 classes"]


@pytest.fixture
def two_dataset_store(tmp_path):
    """One campaign of trainer=vit at 1 and 2 GPUs on each of CIFAR-10 (its root given) and
    the synthetic stand-in of its shapes, the same images at each N (4 and 2 iterations of 8
    per GPU): hand-known times 10 s, 6 s (cifar10) and 20 s, 8 s."""
    times = {("cifar10", 1): 10.0, ("cifar10", 2): 6.0, ("synthetic", 1): 20.0, ("synthetic", 2): 8.0}
    cifar_stand_in = {**CIFAR, "name": "synthetic", "root": None}
    with open_store(f"sqlite:///{tmp_path}/store.db", create=True) as s:
        rows = [dict(idx=i, platform="local", trainer="vit", experiment="weak_scaling", dataset=name, gpus=gpus,
                     nodes=1, repeat=0, batch_per_gpu=8, iterations=4 // gpus, executor="local", state="completed",
                     overrides=[f"gpus={gpus}"] + (["dataset.root=/data/c10"] if name == "cifar10" else []),
                     config=_config("vit", CIFAR if name == "cifar10" else cifar_stand_in))
                for i, (name, gpus) in enumerate(times)]
        ids = s.register({"id": "20260101-000000-aaaa", "created_at": 1.0}, rows)
        with s.engine.begin() as conn:
            conn.execute(insert(attempt), [dict(point_id=p, attempt_no=0, state="completed") for p in ids])
            by_point = dict(conn.execute(select(attempt.c.point_id, attempt.c.id)).all())
            conn.execute(insert(rank_timing), [
                dict(attempt_id=by_point[p], rank=0, warmup_iterations=1, warmup_s=1.0, iterations=4, wall_s=t,
                     iter_mean_s=t / 4, iter_median_s=t / 4, images=8 * 4 * gpus)
                for p, ((name, gpus), t) in zip(ids, times.items())])
        yield s


def test_harvest_keeps_two_datasets_apart_each_against_its_own_baseline(two_dataset_store):
    from campaign.harvest.derive import point_frame
    from campaign.harvest.run import _terminal
    from campaign.harvest.views import scaling_table

    points = point_frame(two_dataset_store, ["20260101-000000-aaaa"])
    assert sorted(set(points["dataset"])) == ["cifar10 32px 10 classes", "synthetic 32px 10 classes (cifar10's shapes)"]
    table = scaling_table(points)
    assert table.columns[:5] == ["view", "platform", "trainer", "experiment", "dataset"]
    speedups = {(r["dataset"].split()[0], r["gpus"]): r["speedup"] for r in table.iter_rows(named=True)}
    # T(1)/T(2) within each dataset (10/6, 20/8), never across them (a merged series would median the two)
    assert speedups == {("cifar10", 1): 1.0, ("cifar10", 2): pytest.approx(10 / 6),
                        ("synthetic", 1): 1.0, ("synthetic", 2): pytest.approx(20 / 8)}
    assert "dataset" in _terminal("scaling", table).columns
    # one dataset: the terminal leaves the column to the exports
    assert "dataset" not in _terminal("scaling", table.filter(table["dataset"].str.starts_with("cifar10"))).columns
