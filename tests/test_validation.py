"""experiment.validation=true: an evaluation pass per epoch on the test split, outside the
timed window, reduced to the whole split's figures; refused for a trainer without one."""

from __future__ import annotations

import pytest

from campaign.common.errors import ConfigError
from campaign.launch.validate import check_trainer

torch = pytest.importorskip("torch")
pytest.importorskip("timm")

from trainers import loop  # noqa: E402
from trainers.dist import DistContext  # noqa: E402
from trainers.instrument import Recorder  # noqa: E402


def _ctx() -> DistContext:
    return DistContext(rank=0, world_size=1, local_rank=0, local_world_size=1, num_nodes=1, device=torch.device("cpu"),
                       backend="none", emulated=False, host="test")


def _cfg(trainer: str, params: dict, validation: bool = True) -> dict:
    return {"gpus": 1, "experiment": {"validation": validation},
            "dataset": {"name": "synthetic", "num_classes": 10, "length": 16},
            "trainer": {"name": trainer, "optimizer": "sgd", "lr": 0.01, "precision": "fp32", "params": params}}


def _train(trainer, iterations: int, warmup: int = 2) -> Recorder:
    rec = Recorder(torch.device("cpu"), warmup=warmup, expected_iterations=iterations)
    loop.train(trainer, rec, iterations)
    return rec


PLAN = {"batch_per_gpu": 4, "iterations": 8, "warmup": 2, "seed": 0, "grad_accum": 1}


def test_vit_evaluates_the_whole_test_split_after_every_epoch():
    from trainers.vit import ViTTrainer

    trainer = ViTTrainer(_ctx(), _cfg("vit", {"model": "vit_tiny", "engine": "ddp"}), PLAN)
    _train(trainer, 10)  # 16 images in batches of 4: epochs 0 and 1 whole, epoch 2 half
    rows = trainer.evaluator.rows
    assert [r["epoch"] for r in rows] == [0, 1, 2]  # the epoch in progress at the end too
    assert all(r["images"] == 4 for r in rows)  # synthetic test split: a fifth of dataset.length=16, rounded up
    assert all(0.0 <= r["accuracy"] <= 1.0 and r["loss"] > 0 and r["seconds"] >= 0 and r["split"] == "test"
               for r in rows)
    assert trainer.model.training  # back to training after each pass


def test_frozen_backbone_evaluates_and_times_its_epochs():
    pytest.importorskip("torchvision")
    from trainers.frozen_backbone import FrozenBackboneTrainer

    params = {"backbone": "squeezenet1_0", "hidden": 16, "image_size": 32, "engine": "ddp", "classifier": "mlp",
              "dropout": 0.5, "mode": "train"}
    trainer = FrozenBackboneTrainer(_ctx(), _cfg("frozen_backbone", params), PLAN)
    _train(trainer, 8)  # exactly two epochs: no pass for a third
    assert [(r["epoch"], r["images"]) for r in trainer.evaluator.rows] == [(0, 4), (1, 4)]
    assert all(0.0 <= r["accuracy"] <= 1.0 for r in trainer.evaluator.rows)
    epochs = {r["phase"]: r["count"] for r in trainer.breakdown_rows() if r["phase"].startswith("epoch_")}
    assert epochs == {"epoch_0": 4, "epoch_1": 4}


def test_evaluation_time_is_taken_off_the_timed_window(monkeypatch):
    from trainers import evaluate
    from trainers.vit import ViTTrainer

    trainer = ViTTrainer(_ctx(), _cfg("vit", {"model": "vit_tiny", "engine": "ddp"}), PLAN)
    excluded = []
    monkeypatch.setattr(Recorder, "exclude", lambda self, s: excluded.append(s))
    _train(trainer, 10)
    # passes after epochs 0 and 1 run inside the loop (taken off); epoch 2's after the window closed
    assert len([s for s in excluded if s > 0]) == 2
    assert evaluate.evaluator_of(trainer) is trainer.evaluator


def test_no_evaluator_without_validation():
    from trainers.vit import ViTTrainer

    trainer = ViTTrainer(_ctx(), _cfg("vit", {"model": "vit_tiny", "engine": "ddp"}, validation=False), PLAN)
    assert trainer.evaluator is None


def test_validation_images_evaluates_that_many_of_the_test_split():
    """experiment.validation_images=N: the first N images of the split, every epoch, the row
    saying how many (the whole split when N is not smaller)."""
    from trainers.vit import ViTTrainer

    for limit, images in ((3, 3), (100, 4)):
        cfg = _cfg("vit", {"model": "vit_tiny", "engine": "ddp"})
        cfg["experiment"]["validation_images"] = limit
        trainer = ViTTrainer(_ctx(), cfg, PLAN)
        _train(trainer, 8)
        assert [(r["epoch"], r["images"]) for r in trainer.evaluator.rows] == [(0, images), (1, images)]
    config = {"trainer": {"name": "vit", "params": {"model": "vit_tiny"}},
              "platform": {"name": "local", "device": "cpu"},
              "experiment": {"validation": True, "validation_images": 0}, "gpus": 1, "nodes": 1}
    with pytest.raises(ConfigError) as err:
        check_trainer(config)
    assert str(err.value) == ("experiment.validation_images=0 evaluates no image; set a count of at least 1, "
                              "or null to evaluate the whole test split")
    config["experiment"] = {"validation": False, "validation_images": 500}
    with pytest.raises(ConfigError) as err:
        check_trainer(config)
    assert str(err.value) == ("experiment.validation_images=500 does nothing with experiment.validation=false "
                              "(no evaluation pass); set experiment.validation=true or "
                              "experiment.validation_images=null")


def test_a_figure_of_part_of_the_test_split_says_so():
    """campaign figures' note under a test-accuracy figure whose passes evaluated fewer
    images than the dataset's test split (experiment.validation_images); none for the whole."""
    pl = pytest.importorskip("polars")
    from campaign.harvest.declared_draw import _test_share

    rows = pl.DataFrame({"point_dataset": ["cifar10 32px 10 classes", "cifar100 32px 100 classes", "synthetic 32px"],
                         "test_images": [500, 10_000, 8]})
    assert _test_share(rows) == [
        "test loss and accuracy over 500 of cifar10's 10,000 test images a pass (experiment.validation_images)"]


@pytest.mark.parametrize("trainer", ["synthetic", "sleep"])
def test_refused_for_a_trainer_without_an_evaluation_pass(trainer):
    config = {"trainer": {"name": trainer, "params": {}}, "platform": {"name": "local", "device": "cpu"},
              "experiment": {"validation": True}, "gpus": 1, "nodes": 1}
    with pytest.raises(ConfigError) as err:
        check_trainer(config)
    assert str(err.value) == (f"trainer={trainer} has no evaluation pass (experiment.validation=true); "
                              f"trainers that have one: frozen_backbone, vit, or set experiment.validation=false")


# ---------------------------------------------------------------------------- launch-time checks


def _datagen():
    try:
        from tests import datagen
    except ImportError:  # tests/ on sys.path as a rootdir folder rather than a package
        import datagen
    return datagen


def test_a_cifar_root_without_its_test_batch_is_refused_at_launch_in_one_line(tmp_path):
    import subprocess
    import sys

    folder = _datagen().write_cifar10(tmp_path / "data", n_per_batch=4)
    (folder / "test_batch").unlink()
    res = subprocess.run([sys.executable, "-m", "campaign.launch", "platform=local", f"results_dir={tmp_path / 'res'}",
                          "trainer=vit", "trainer.params.model=vit_tiny", "dataset=cifar10",
                          f"dataset.root={tmp_path / 'data'}", "experiment=smoke", "experiment.validation=true"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr.splitlines() == [
        f"error: dataset.root={tmp_path / 'data'}: {folder / 'test_batch'} missing, and experiment.validation=true "
        f"evaluates the test split; add CIFAR-10's test_batch (python version) or set experiment.validation=false"]
    assert not (tmp_path / "res" / "campaign.db").exists()  # refused before anything was stored


def test_the_test_split_is_checked_only_where_validation_reads_it(tmp_path):
    from campaign.catalogue.datasets import check_dataset

    datagen = _datagen()
    cifar = datagen.write_cifar100(tmp_path / "c100", n=4)
    (cifar / "test").unlink()
    spec = {"name": "cifar100", "root": str(tmp_path / "c100"), "num_classes": 100}
    check_dataset(spec)  # training only: the test split is not read
    with pytest.raises(ConfigError, match=r"cifar-100-python/test missing, and experiment.validation=true .* "
                                          r"add CIFAR-100's test \(python version\)"):
        check_dataset(spec, test_split=True)
    mnist = datagen.write_mnist(tmp_path / "mnist", n=4)
    (mnist / "t10k-labels-idx1-ubyte").unlink()
    (mnist / "t10k-images-idx3-ubyte").unlink()
    check_dataset({"name": "mnist", "root": str(mnist)})
    with pytest.raises(ConfigError) as err:
        check_dataset({"name": "mnist", "root": str(mnist)}, test_split=True)
    assert str(err.value) == (f"dataset.root={mnist}: t10k-images-idx3-ubyte[.gz] missing in {mnist}, and "
                              f"experiment.validation=true evaluates the test split; add MNIST's test files or set "
                              f"experiment.validation=false")
    check_dataset({"name": "synthetic"}, test_split=True)  # generated: nothing to read


@pytest.mark.parametrize("engine,gpus", [("ddp", 1), ("vanilla", 1)])
def test_frozen_backbone_trains_on_its_share_per_gpu_as_the_epoch_arithmetic_counts(engine, gpus):
    """experiment.dataset_fraction_per_gpu=0.25 of 80 synthetic images on 1 GPU: 20 images,
    5 batches of 4 per epoch, which is what the launch plans an epoch as."""
    pytest.importorskip("torchvision")
    from campaign.launch.plan import iterations_per_epoch, training_images
    from trainers.frozen_backbone import FrozenBackboneTrainer

    params = {"backbone": "squeezenet1_0", "hidden": 16, "image_size": 32, "engine": engine, "classifier": "mlp",
              "dropout": 0.5, "mode": "train"}
    cfg = _cfg("frozen_backbone", params, validation=False)
    cfg["dataset"]["length"] = 80
    cfg["experiment"]["dataset_fraction_per_gpu"] = 0.25
    trainer = FrozenBackboneTrainer(_ctx(), cfg, PLAN)
    assert trainer.dataset_size == 20 and len(trainer.loader) == 5
    assert training_images(cfg) == 20 and iterations_per_epoch(20, PLAN["batch_per_gpu"], gpus) == 5


def test_vit_epoch_accuracy_counts_the_timed_runs_images_only():
    """The profiler window after the run trains 3 more iterations: they are in no epoch row,
    so neither are their answers (16 images a whole epoch, 8 the half epoch in progress)."""
    from trainers.vit import ViTTrainer

    trainer = ViTTrainer(_ctx(), _cfg("vit", {"model": "vit_tiny", "engine": "ddp"}, validation=False), PLAN)
    _train(trainer, 10)
    loop.profile_window(trainer, torch.device("cpu"), 3, trace_path=None)
    epochs = trainer.summary_extra()["epochs"]
    assert [(d["epoch"], d["iterations"]) for d in epochs] == [(0, 4), (1, 4), (2, 2)]
    assert trainer._seen == {0: 16, 1: 16, 2: 8}
