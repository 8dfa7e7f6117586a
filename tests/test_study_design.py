"""A study preset is a design (issue #47): the dry run shows its factors before the points, and
an override on it says what it replaced, applies where it is read, and a refusal names where
a value the user did not type came from. In-process dry runs (nothing is stored or run)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from conftest import Workspace, hydra_version_base_kept

REPO = Path(__file__).resolve().parents[1]
PRESETS = sorted(p.stem for p in (REPO / "conf" / "study").glob("*.yaml"))
STANDIN = {"swinv2_thesis_small", "dataparallel_a6000_small", "vit_deepspeed_small"}  # they name their own root


@pytest.fixture
def dry(tmp_path, monkeypatch):
    """``dry(*overrides)`` -> (exit status, stdout, stderr) of ``campaign launch -m ... --dry-run``,
    run in this process, away from any SLURM (its clients answer that there is no cluster)."""
    from hydra.core.global_hydra import GlobalHydra

    from campaign.common.errors import CampaignError
    from campaign.launch.main import launch

    ws = Workspace(tmp_path).away_from_slurm()
    monkeypatch.setenv("PATH", ws.env["PATH"])
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")  # the launch sets it; put back after the test

    def run(*overrides: str, flag: str = "--dry-run") -> tuple[int, str, str]:
        import contextlib
        import io

        out, err = io.StringIO(), io.StringIO()
        GlobalHydra.instance().clear()
        code = 0
        with hydra_version_base_kept(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                launch(["-m", *overrides, flag], "campaign launch")
            except CampaignError as exc:
                code, _ = 2, print(f"error: {exc}", file=err)
        GlobalHydra.instance().clear()
        return code, out.getvalue(), err.getvalue()

    return run


def _design(preset: str) -> dict:
    """A preset's design, its included preset's first (as Hydra merges them)."""
    from omegaconf import OmegaConf

    from campaign.catalogue.design import DesignSpec

    body = yaml.safe_load((REPO / "conf" / "study" / f"{preset}.yaml").read_text())
    parents = [d for d in body.get("defaults") or () if isinstance(d, str) and d != "_self_"]
    merged = OmegaConf.structured(DesignSpec)
    for name in parents:
        merged = OmegaConf.merge(merged, _design(name))
    return OmegaConf.to_container(OmegaConf.merge(merged, body["study"].get("design") or {}))


def _lines(text: str, start: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(start)]


@pytest.mark.parametrize("preset", PRESETS)
def test_every_factor_keys_override_is_reported(preset, dry):
    design = _design(preset)
    factors = [f for f in design["factors"].values() if f]
    assert factors, f"study={preset} declares no factor"
    picks = {}
    for f in factors:  # each factor key at one of its levels: its default where it has one
        picks.setdefault(f["key"], design["defaults"].get(f["key"], f["values"][-1]))
    root = [] if preset in STANDIN else ["dataset.root=/data/study"]
    code, out, err = dry(f"study={preset}", *root, *(f"{k}={v}" for k, v in picks.items()))
    assert code == 0, err
    said = _lines(out, "override: ")
    for key, value in picks.items():
        assert any(line.startswith(f"override: {key}={value} replaces the ") for line in said), (key, said)
    assert out.splitlines()[1] == f"design of study={preset} (conf/study/{preset}.yaml, study.design):"


def test_overrides_on_the_dataparallel_design_say_what_they_replaced(dry):
    # one launch, four of the overrides: two factors replaced, two keys the inference points do not read
    code, out, err = dry("study=dataparallel_a6000", "dataset.root=/data/mnist", "gpus=2", "experiment.global_batch=512",
                         "trainer.params.loss_threshold=0.05", "trainer.lr=0.001", flag="--json")
    assert code == 0, err
    points = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert len(points) == 16  # backbone 5 + hidden 2 more, with nn.DataParallel and with DDP; 2 inference engines
    why = ("the 2 with trainer.params.mode=inference do not read it (inference runs the forward pass only: no loss, "
           "no gradient, no optimizer step)")
    said = _lines(err, "override: ")
    assert said[:2] == [
        "override: gpus=2 replaces the parallelism factor (1..4; Fig 1; DDP beside Fig 1): they will have one point",
        "override: experiment.global_batch=512 replaces the batch-size factor (32..1,024; Figs 2, 4; DDP beside "
        "Fig 2): they will have one point"]
    assert sorted(said[2:]) == [f"override: trainer.lr=0.001 applies to 14 of the 16 points; {why}",
                                f"override: trainer.params.loss_threshold=0.05 applies to 14 of the 16 points; {why}"]
    read = {(p["config"]["trainer"]["params"]["mode"], p["config"]["trainer"]["params"]["loss_threshold"],
             p["config"]["trainer"]["lr"]) for p in points}
    assert read == {("train", 0.05, 0.001), ("inference", None, 0.01)}
    design = err.splitlines()[err.splitlines().index(
        "design of study=dataparallel_a6000 (conf/study/dataparallel_a6000.yaml, study.design):") + 1:]
    assert design[0] == ("  factor gpus                     parallelism: 2; one point with trainer.params.mode=train "
                         "trainer.params.engine=dataparallel; Fig 1")
    assert ("  factor trainer.params.backbone  backbone: vgg16, squeezenet1_0, alexnet, resnet18, densenet121; 5 points "
            "with trainer.params.mode=train trainer.params.engine=dataparallel; Fig 3") in design
    assert ("  factor experiment.global_batch  inference batch-size: 512; 2 points with trainer.params.mode=inference; "
            "Fig 4") in design
    assert "  campaign's choice: trainer.params.loss_threshold=0.1 (the text names no threshold; override it)" in design


def test_overrides_on_the_vit_design_relabel_the_points_they_turn(dry):
    code, out, err = dry("study=vit_deepspeed", "dataset.root=/data/cifar", "experiment.dataset_fraction_per_gpu=0.2",
                         "experiment.images_per_gpu=128", flag="--json")
    assert code == 0, err
    assert _lines(err, "override: ") == [
        "override: experiment.dataset_fraction_per_gpu=0.2 replaces the study's experiment.dataset_fraction_per_gpu=0.1 "
        "(section IV-A: \"1 GPU uses 10% of the dataset while 8 GPUs use 80% of the dataset\")",
        "override: experiment.images_per_gpu=128 replaces the batch (images per GPU) factor (16, 64; Figs 12, 13): "
        "they will have one point",
        "override: experiment.images_per_gpu=128 replaces the study's experiment.images_per_gpu=64 (section IV-C: "
        "\"due to memory constraints in the Vector cluster, only batch size of 64 can be successfully obtained\")",
        "override: experiment.dataset_fraction_per_gpu=0.2 turns the strong-scaling points (experiment=vit_strong; "
        "Figs 8, 16, 12, 13) into dataset-share runs (a share of the training set per GPU, as vit_weak's): "
        "16 points relabelled vit_strong+dataset_fraction_per_gpu=0.2"]
    points = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert {p["config"]["experiment"]["name"] for p in points} == {"vit_strong+dataset_fraction_per_gpu=0.2", "vit_weak"}
    one = next(p for p in points if p["label"].startswith("platform=t4 gpus=1 ") and "vit_strong" in p["label"]
               and p["config"]["dataset"]["name"] == "cifar10" and p["config"]["trainer"]["params"]["engine"] == "ddp")
    assert "experiment=vit_strong+dataset_fraction_per_gpu=0.2" in one["label"]
    # 0.2 of CIFAR-10's 50,000 images at 128 a GPU: 78 iterations an epoch, 5 epochs less 5 warm-up
    assert one["schedule"]["iterations"] == 5 * (10_000 // 128) - 5


def test_the_thesis_says_its_fixed_problem_changed_and_its_real_dataset(dry):
    code, out, _ = dry("study=swinv2_thesis", "dataset=synthetic", "experiment.images_per_gpu=16")
    assert code == 0
    assert _lines(out, "override: ") == [
        "override: experiment.images_per_gpu=16 replaces the study's experiment.images_per_gpu=8 (section 4.2: "
        "\"the base problem size of 160K training iterations with 8 images per iteration sent to a single GPU\"); "
        "the iterations stay 160K/N (experiment.base_iterations), so the fixed problem is no longer the study's"]
    assert ("note: would be refused here: study=swinv2_thesis reads its dataset from files, as the study did; "
            "dataset=synthetic has none: drop dataset=synthetic and name the study's ade20k folder "
            "(dataset.root=/path/to/ade20k), or write a stand-in of it there first "
            "(campaign datagen ade20k --out DIR --size full)") in out.splitlines()
    assert "datagen synthetic" not in out


@pytest.mark.parametrize("typed, preset_value, instead", [
    ("trainer.params.backbone=resnet18", "trainer.params.hidden=2048", "trainer.params.hidden=4096"),
    ("trainer.params.engine=ddp", "trainer.params.procs_per_node=2", "trainer.params.procs_per_node=1"),
])
def test_a_refusal_over_the_presets_value_names_the_preset(typed, preset_value, instead, dry):
    code, _, err = dry("study=dataparallel_a6000", "dataset.root=/data/mnist", typed)
    assert code == 2
    assert (f"{preset_value} is study=dataparallel_a6000's (its grid, hydra.sweeper), not the command line's: "
            f"add {instead} to replace it") in err


def test_the_not_gathered_sentence_is_quoted_only_for_its_platforms(dry):
    code, _, err = dry("study=swinv2_thesis", "dataset.root=/data/ade20k", "platform=h100", "gpus=16")
    assert code == 2
    assert err.strip().endswith("h100 has 8 GPUs per node; 16 needs nodes=2")
    assert "section 4.2" not in err


def test_a_groups_default_the_variant_does_not_read_is_dropped(dry):
    code, out, err = dry("dataset=ade20k", "dataset.name=synthetic")
    assert code == 0, err
    assert ("note: dataset.num_workers=4 is dataset=ade20k's default, which nothing reads with trainer=synthetic "
            "(it cycles a few batches made before timing: no loader, no workers): dropped") in out.splitlines()


def test_shown_values_and_feeds():
    from campaign.launch.design import feeds_of, shown_values

    assert shown_values(["64", "128", "1024"]) == "64..1,024"
    assert shown_values(["16", "64"]) == "16, 64"
    assert shown_values(["v100", "a100"]) == "v100, a100"
    assert feeds_of([{"feeds": ["Fig 2", "DDP beside Fig 2"]}, {"feeds": ["Fig 4", "Fig 2"]}]) == \
        "Figs 2, 4; DDP beside Fig 2"
    assert feeds_of([{"feeds": ["Table 3", "Fig 1"]}]) == "Fig 1; Table 3"


def test_the_vit_dry_run_without_deepspeed_shows_every_point(dry, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "deepspeed" else real(name, *a))
    code, out, err = dry("study=vit_deepspeed", "dataset.root=/data/cifar", "gpus=1")
    assert code == 0, err
    assert out.startswith("dry run: 9 point(s)")  # 8 of the grid and Fig 12's batch 16, DeepSpeed's among them
    notes = [line for line in out.splitlines() if "needs DeepSpeed" in line]
    assert notes == ["note: would be refused here: engine=deepspeed needs DeepSpeed, which is not installed; install "
                     "it with: pip install -c constraints.txt 'campaign[deepspeed]'"]  # as docs/studies.md gives it
