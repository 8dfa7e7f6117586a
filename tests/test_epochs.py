"""experiment.epochs=E: warm-up + timed iterations = E x the loader's iterations per epoch
of the point's training share (strong: the whole set; weak: a share per GPU)."""

from __future__ import annotations

import pytest

from campaign.common.errors import ConfigError
from campaign.launch.plan import epoch_schedule, iterations_per_epoch, training_images
from campaign_datasets import split_images


def _c(gpus: int, dataset: dict, **exp) -> dict:
    return {"gpus": gpus, "dataset": dataset, "experiment": dict({"warmup_iterations": 5, "grad_accum": 1}, **exp)}


CIFAR = {"name": "cifar10"}


def test_declared_split_sizes():
    assert split_images(CIFAR, True) == 50_000 and split_images(CIFAR, False) == 10_000
    assert split_images({"name": "mnist"}, True) == 60_000 and split_images({"name": "mnist"}, False) == 10_000
    assert split_images({"name": "synthetic", "length": 16}, False) == 4
    assert split_images({"name": "synthetic"}, True) == 10_000
    assert split_images({"name": "imagefolder"}, True) is None


def test_strong_scaling_whole_set():
    # 50,000 images, global batch 1,024 = 4 x 256: 48 full batches per GPU (the last partial one dropped)
    c = _c(4, CIFAR, epochs=5)
    assert training_images(c) == 50_000
    assert iterations_per_epoch(50_000, 256, 4) == 48
    assert epoch_schedule(c, 256) == 5 * 48 - 5  # warm-up counted in the 5 epochs


def test_weak_scaling_share_per_gpu():
    # 10 % per GPU at 64 images per GPU: 2 GPUs train on 10,000 images, 78 iterations per epoch
    c = _c(2, CIFAR, epochs=5, dataset_fraction_per_gpu=0.1)
    assert training_images(c) == 10_000
    assert epoch_schedule(c, 64) == 5 * (10_000 // 128) - 5
    assert training_images(_c(16, CIFAR, epochs=1, dataset_fraction_per_gpu=0.1)) == 50_000  # capped at 1


def test_grad_accum_takes_several_batches_per_iteration():
    assert iterations_per_epoch(1_000, 10, 2, grad_accum=4) == 13  # 50 batches per GPU, 4 per step: ceil(50/4)


@pytest.mark.parametrize("exp,message", [
    ({"epochs": 2, "iterations": 10}, "experiment.epochs=2 and experiment.iterations=10 both set the run's length; "
                                      "drop one of them"),
    ({"epochs": 0}, "experiment.epochs must be a positive integer, got 0"),
    ({"epochs": 1, "warmup_iterations": 400}, "experiment.epochs=1 is 48 iterations (48 per epoch), no more than "
                                              "experiment.warmup_iterations=400; raise epochs or lower the warm-up"),
])
def test_refusals(exp, message):
    with pytest.raises(ConfigError) as err:
        epoch_schedule(_c(4, CIFAR, **exp), 256)
    assert str(err.value) == message


def test_refused_where_the_size_is_unknown():
    with pytest.raises(ConfigError, match="dataset=imagefolder declares no training-set size"):
        epoch_schedule(_c(1, {"name": "imagefolder"}, epochs=1), 8)


def test_the_dry_run_shows_each_points_iterations_from_its_epochs(ws):
    """40 synthetic images, 4 per GPU, 2 epochs, 1 warm-up: 2 x 10 - 1 = 19 timed iterations
    on 1 GPU, 2 x 5 - 1 = 9 on 2; a line says how the column was counted."""
    res = ws.launch("-m", "platform=local", "gpus=1,2", "trainer=vit", "trainer.params.model=vit_tiny",
                    "dataset=synthetic", "dataset.length=40", "experiment=smoke", "experiment.epochs=2",
                    "experiment.images_per_gpu=4", "--dry-run")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    header = lines[2].split()
    rows = [ln.split() for ln in lines[4:6]]
    col = header.index("iterations") - 2  # "time limit" and "global batch" are two words each
    assert [(r[2], r[col]) for r in rows] == [("1", "19"), ("2", "9")]
    assert lines[6] == "iterations: experiment.epochs=2 epoch(s) of each point's training share, less its 1 warm-up " \
                       "iteration(s)"
    assert not ws.db.exists()  # a dry run stores nothing


@pytest.mark.parametrize("trainer,experiment,sizes,iterations", [
    # CIFAR-10: 10 % share per GPU = 5,000 images at 64 a GPU = 78 iterations an epoch; 2 x 78 - 5
    ("vit", "vit_weak", (50_000, 10_000), 151),
    # MNIST: 60,000 at a global batch of 1,024 = 58 iterations an epoch; 2 x 58 - 5
    ("frozen_backbone", "dataparallel_study", (60_000, 10_000), 111),
])
def test_a_study_dataset_stood_in_by_synthetic_keeps_its_sizes(ws, trainer, experiment, sizes, iterations):
    """Without dataset.root a trainer's study dataset becomes synthetic batches of its shapes
    and of its split sizes, so its epochs are the study's (an H200 vit_weak run had trained
    15 iterations an epoch on synthetic's default 10,000 images)."""
    import json

    res = ws.launch("platform=local", "gpus=1", f"trainer={trainer}", f"experiment={experiment}",
                    "experiment.epochs=2", "--dry-run", "--json")
    assert res.returncode == 0, res.stderr
    [point] = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
    dataset = point["config"]["dataset"]
    assert (dataset["name"], dataset["length"], dataset["test_length"]) == ("synthetic", *sizes)
    assert point["schedule"]["iterations"] == iterations
    named = ws.launch("platform=local", "gpus=1", f"trainer={trainer}", "dataset=synthetic", "dataset.length=640",
                      "--dry-run", "--json")
    [point] = [json.loads(line) for line in named.stdout.splitlines() if line.startswith("{")]
    assert point["config"]["dataset"]["length"] == 640 and "test_length" not in point["config"]["dataset"]


def test_an_uneven_split_counts_epochs_in_global_batches():
    # DataParallel scatters 1,024 over 3 GPUs (342, 342, 340): one loader of 1,024-image batches,
    # so 2,050 images are 2 iterations an epoch (2 x 1,026 = 2,052 would make it 1)
    c = _c(3, {"name": "synthetic", "length": 2_050}, epochs=3, scaling="strong", global_batch=1024,
           warmup_iterations=1)
    assert training_images(c) == 2_050
    assert epoch_schedule(c, 342) == 3 * 2 - 1
