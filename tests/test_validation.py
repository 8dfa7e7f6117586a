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


@pytest.mark.parametrize("trainer", ["synthetic", "sleep"])
def test_refused_for_a_trainer_without_an_evaluation_pass(trainer):
    config = {"trainer": {"name": trainer, "params": {}}, "platform": {"name": "local", "device": "cpu"},
              "experiment": {"validation": True}, "gpus": 1, "nodes": 1}
    with pytest.raises(ConfigError) as err:
        check_trainer(config)
    assert str(err.value) == (f"trainer={trainer} has no evaluation pass (experiment.validation=true); "
                              f"trainers that have one: frozen_backbone, vit, or set experiment.validation=false")
