"""Planning and validation of points: pure functions, exact messages."""

from __future__ import annotations

import pytest

from campaign.common.errors import ConfigError
from campaign.launch.placement import check_resources
from campaign.launch.plan import plan_point, schedule
from conftest import EMULATED_GPUS, hydra_version_base_kept

V100 = {"name": "v100", "executor": "slurm", "gpus_per_node": 4, "max_nodes": 4}


@pytest.mark.parametrize("gpus,iters", [(1, 160000), (2, 80000), (4, 40000), (8, 20000)])
def test_weak_scaling_is_160k_over_n_at_8_images_per_gpu(gpus, iters):
    exp = {"scaling": "weak", "images_per_gpu": 8, "base_iterations": 160000}
    assert schedule(exp, gpus) == (8, iters)


def test_strong_scaling_splits_the_global_batch():
    exp = {"scaling": "strong", "global_batch": 64, "base_iterations": 100}
    assert schedule(exp, 4) == (16, 100)
    with pytest.raises(ConfigError, match="global_batch=64 does not split over 3 GPUs"):
        schedule(exp, 3)


def test_explicit_iterations_win():
    assert schedule({"scaling": "weak", "images_per_gpu": 8, "base_iterations": 100, "iterations": 7}, 4) == (8, 7)


def test_too_few_iterations_is_refused():
    with pytest.raises(ConfigError, match="8 GPUs leave 0 iterations"):
        schedule({"scaling": "weak", "images_per_gpu": 8, "base_iterations": 4}, 8)


@pytest.mark.parametrize(
    "gpus,nodes,message",
    [
        (8, 1, "v100 has 4 GPUs per node; 8 needs nodes=2"),
        (0, 1, "gpus must be a positive integer, got 0"),
        (6, 4, "gpus=6 does not divide over nodes=4; use a multiple of 4"),
        (32, 8, "v100 allows at most 4 node(s) per job, got nodes=8"),
        (64, 1, "v100 has 4 GPUs per node; gpus=64 does not fit"),
        (True, 1, "gpus must be a positive integer, got True"),
    ],
)
def test_resources_refused_with_reason(gpus, nodes, message):
    with pytest.raises(ConfigError) as err:
        check_resources(V100, gpus, nodes)
    assert str(err.value) == message


def test_multi_node_point_fits():
    check_resources(V100, 8, 2)


def test_fast_composer_gives_the_config_hydra_composes(ws):
    """A point of a sweep (composer: group choices composed once, value overrides applied
    to the resolved copy) has exactly the config Hydra composes for that point alone."""
    overrides = ["platform=v100", EMULATED_GPUS, "trainer.params.width=8", "seed=3", "experiment.images_per_gpu=4",
                 "platform.cpus_per_task=2", "dry_run=json"]
    sweep = ws.launch("-m", "gpus=1,2", *overrides)
    single = ws.launch("gpus=2", *overrides)
    assert sweep.returncode == 0 and single.returncode == 0, sweep.stderr + single.stderr

    def config_of(out: str, gpus: int) -> dict:
        import json

        return next(d["config"] for d in map(json.loads, out.splitlines()) if f" gpus={gpus} " in d["label"])

    assert config_of(sweep.stdout, 2) == config_of(single.stdout, 2)
    assert config_of(sweep.stdout, 2)["experiment"]["images_per_gpu"] == 4 and "seed" not in config_of(sweep.stdout, 2)


def test_a_sampled_run_with_checkpoints_is_refused():
    exp = {"scaling": "weak", "images_per_gpu": 8, "base_iterations": 1000, "sample_iterations": 100,
           "checkpoint": True}
    with pytest.raises(ConfigError) as err:
        schedule(exp, 1)
    assert str(err.value) == ("experiment.checkpoint=true does not go with a sampled run "
                              "(experiment.sample_iterations=100); drop one of them")
    assert schedule(dict(exp, sample_iterations=1000), 1) == (8, 1000)  # not a sample: nothing to refuse


def _composed(*overrides: str):
    """A point's config as Hydra composes it for campaign's app."""
    from hydra import compose, initialize_config_module

    from campaign.catalogue.config import register

    register()
    with hydra_version_base_kept(), initialize_config_module("campaign_conf", version_base="1.3"):
        return compose("config", overrides=["experiment=smoke", *overrides])


def test_each_point_looks_its_trainer_declaration_up_once(monkeypatch):
    """Every rule of a point's trainer (optimizer, precision, device, params, engine,
    checkpoint) and its resources read ONE lookup of the trainer's declaration."""
    from trainers import registry

    sweep = [_composed("platform=v100", EMULATED_GPUS, f"gpus={gpus}", *trainer) for gpus in (1, 2, 4)
             for trainer in (["trainer=synthetic"], ["trainer=frozen_backbone", "trainer.params.engine=dataparallel"],
                             ["trainer=vit"])]
    looked_up: list[str] = []
    spec_of = registry.spec_of
    monkeypatch.setattr(registry, "spec_of", lambda trainer: looked_up.append(trainer["name"]) or spec_of(trainer))
    points = [plan_point(cfg, idx, []) for idx, cfg in enumerate(sweep)]
    assert looked_up == [p.config["trainer"]["name"] for p in points]  # one per point, its own trainer
    # what the plan took from that lookup: dataparallel drives a node's GPUs from one process
    layout = {(p.config["trainer"]["name"], p.gpus): (p.resources.tasks_per_node, p.resources.gpus_per_node)
              for p in points}
    assert layout[("frozen_backbone", 4)] == (1, 4) and layout[("synthetic", 4)] == (4, 4)


def test_plain_copy_is_a_deep_copy_of_a_plain_config():
    """compose.plain_copy (marshal, issue 26's cut): equal, nothing shared, types kept;
    what marshal refuses still copies (copy.deepcopy)."""
    import enum

    from campaign.launch.compose import plain_copy

    cfg = {"a": {"b": [1, 2.5, "x", None, True, {"c": (1, 2)}]}, "big": 2**70, "f": float("inf")}
    got = plain_copy(cfg)
    assert got == cfg and got is not cfg and got["a"]["b"] is not cfg["a"]["b"]
    assert [type(v) for v in got["a"]["b"]] == [int, float, str, type(None), bool, dict]
    got["a"]["b"][5]["c"] = 0
    assert cfg["a"]["b"][5]["c"] == (1, 2)

    class Kind(enum.Enum):
        A = 1

    odd = {"k": Kind.A, "s": {1, 2}}
    assert plain_copy(odd) == odd and plain_copy(odd)["s"] is not odd["s"]
