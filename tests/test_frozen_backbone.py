"""The frozen-backbone study: parameter counts, the hand-built data-parallel module
against nn.DataParallel, the launch-time engine rules, and every engine end to end
through campaign on the local executor."""

from __future__ import annotations

import copy
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from campaign.common.errors import ConfigError
from campaign.launch.validate import check_engine, check_trainer

try:
    from tests.datagen import write_mnist
except ImportError:  # tests/ on sys.path as a rootdir folder rather than a package
    from datagen import write_mnist
from conftest import Result, Workspace

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")
from torch import nn  # noqa: E402

from trainers.frozen_backbone import sync_volume  # noqa: E402
from trainers.models.classifier import BACKBONES, build_classifier, head_params, trainable_params  # noqa: E402
from trainers.parallel import HandDataParallel, dp_forward  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
PYTHON = str(REPO / ".venv" / "bin" / "python") if (REPO / ".venv" / "bin" / "python").exists() else sys.executable
# What each backbone hands its ImageNet head (torchvision's architectures).
FEATURES = {"alexnet": 256 * 6 * 6, "densenet121": 1024, "resnet18": 512, "squeezenet1_0": 512, "vgg16": 512 * 7 * 7}
# The smallest backbone (1.2M parameters) at 32x32: end-to-end runs cost start-up, not compute.
TINY = ["trainer.params.backbone=squeezenet1_0", "trainer.params.image_size=32"]  # its study head: linear


# ---------------------------------------------------------------------------- the model


@pytest.mark.parametrize("backbone", BACKBONES)
@pytest.mark.parametrize("classifier,hidden", [("mlp", 4096), ("mlp", 1024), ("mlp", 256), ("linear", 4096)])
def test_trainable_parameters_are_the_head_only(backbone, classifier, hidden):
    with torch.device("meta"):  # counting needs no memory and no forward pass
        model = build_classifier(backbone, hidden=hidden, classifier=classifier)
    f = FEATURES[backbone]
    assert model.features == f
    expected = f * 10 + 10 if classifier == "linear" else (f * hidden + hidden) + (hidden * hidden + hidden) + (hidden * 10 + 10)
    assert trainable_params(model) == head_params(f, hidden, 10, classifier) == expected
    assert not any(p.requires_grad for p in model.backbone.parameters())


# The DataParallel study's trainable parameters per backbone ("Experiment design", iii).
STUDY_COUNTS = {"squeezenet1_0": 5_130, "alexnet": 54_575_114, "resnet18": 5_130, "densenet121": 21_020_682,
                "vgg16": 119_586_826}


@pytest.mark.parametrize("backbone", sorted(STUDY_COUNTS))
def test_default_heads_reproduce_the_studys_five_parameter_counts(backbone):
    """The real torchvision architectures (weights=None: never downloaded) with the trainer's
    default head (classifier=study) and hidden size, on the meta device: counting needs no
    memory and no initialisation (vgg16's head alone is 119M parameters)."""
    from dataclasses import asdict

    from trainers.specs.frozen_backbone import FrozenBackboneParams, head_of

    params = {k: getattr(v, "value", v) for k, v in asdict(FrozenBackboneParams()).items()} | {"backbone": backbone}
    with torch.device("meta"):
        model = build_classifier(backbone, hidden=params["hidden"], classifier=head_of(params), weights=None)
    assert trainable_params(model) == STUDY_COUNTS[backbone]


def test_vgg16_with_4096_hidden_has_the_reference_count():
    with torch.device("meta"):
        model = build_classifier("vgg16", hidden=4096)
    assert trainable_params(model) == 119_586_826


def test_head_layout():
    with torch.device("meta"):
        head = build_classifier("resnet18", hidden=8).head
        linear = build_classifier("resnet18", classifier="linear").head
    assert [type(m).__name__ for m in head] == ["Linear", "ReLU", "Dropout", "Linear", "ReLU", "Dropout", "Linear"]
    assert (head[0].in_features, head[0].out_features, head[3].out_features, head[6].out_features) == (512, 8, 8, 10)
    assert isinstance(linear, nn.Linear) and (linear.in_features, linear.out_features) == (512, 10)


def test_backbone_stays_frozen_while_training():
    torch.manual_seed(0)
    model = build_classifier("resnet18", hidden=8).train()
    assert not model.backbone.training and model.head.training
    before = copy.deepcopy(model.state_dict())
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1, momentum=0.9)
    nn.functional.cross_entropy(model(torch.randn(4, 3, 32, 32)), torch.tensor([0, 1, 2, 3])).backward()
    opt.step()
    after = model.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed and all(k.startswith("head.") for k in changed)  # BatchNorm statistics untouched too


def test_weights_from_a_local_file(tmp_path):
    import torchvision

    torch.manual_seed(1)
    reference = torchvision.models.squeezenet1_0()  # a full torchvision file, ImageNet head included
    torch.save(reference.state_dict(), tmp_path / "squeezenet1_0.pth")
    model = build_classifier("squeezenet1_0", hidden=8, weights=str(tmp_path / "squeezenet1_0.pth"))
    assert torch.equal(model.backbone.features[0].weight, reference.features[0].weight)
    torch.save(torchvision.models.squeezenet1_1().state_dict(), tmp_path / "squeezenet1_1.pth")
    with pytest.raises(ValueError, match="not squeezenet1_0 weights"):  # same keys, other shapes
        build_classifier("squeezenet1_0", weights=str(tmp_path / "squeezenet1_1.pth"))
    torch.save(nn.Linear(2, 2).state_dict(), tmp_path / "other.pth")
    with pytest.raises(ValueError, match="not squeezenet1_0 weights"):  # other keys
        build_classifier("squeezenet1_0", weights=str(tmp_path / "other.pth"))


def test_unknown_backbone_lists_choices():
    with pytest.raises(ValueError, match="available: alexnet, densenet121, resnet18, squeezenet1_0, vgg16"):
        build_classifier("resnet50")


# ---------------------------------------------------------------------------- hand-built vs DataParallel
#
# Honest on CPU: nn.DataParallel without CUDA runs its module on the whole batch, which
# is the full-batch gradient DataParallel computes on GPUs too. HandDataParallel's
# primitives are plain tensor copies, so over ["cpu", "cpu"] it really makes a second
# replica, splits the batch, runs both halves in two threads, gathers and sums the
# replica gradients: the same code that runs over CUDA devices, on one device type.


def _pair(batch: int, devices: list[str]):
    torch.manual_seed(0)
    model = build_classifier("squeezenet1_0", hidden=16, dropout=0.0)  # no dropout: same masks on both sides
    twin = copy.deepcopy(model)
    x, y = torch.randn(batch, 3, 32, 32), torch.arange(batch) % 10
    dp = nn.DataParallel(model).train()
    nn.functional.cross_entropy(dp(x), y).backward()
    hand = HandDataParallel(twin, devices).train()
    return model, hand, x, y


@pytest.mark.parametrize("batch,devices", [(6, ["cpu", "cpu"]), (5, ["cpu", "cpu"]), (7, ["cpu", "cpu", "cpu"])])
def test_hand_built_gradients_equal_dataparallel(batch, devices):
    model, hand, x, y = _pair(batch, devices)
    seen = []
    for r in hand.replicas:
        r.head.register_forward_hook(lambda m, i, o: seen.append(len(i[0])))
    nn.functional.cross_entropy(hand(x), y).backward()
    assert sorted(seen, reverse=True) == [len(c) for c in x.chunk(len(devices))]  # every replica ran its chunk
    master = [p.grad.clone() for p in hand.module.head.parameters()]
    assert any(not torch.allclose(a.grad, b, atol=1e-6) for a, b in zip(model.head.parameters(), master))
    hand.reduce_gradients()  # the synchronisation step: without it the master has its chunk's share only
    for a, b in zip(model.head.parameters(), hand.module.head.parameters()):
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-5, atol=1e-6)
    assert all(p.grad is None for r in hand.replicas[1:] for p in r.head.parameters())
    hand.close()


def test_replicate_carries_the_step_to_every_replica():
    _, hand, x, y = _pair(4, ["cpu", "cpu"])
    opt = torch.optim.SGD([p for p in hand.parameters() if p.requires_grad], lr=0.1)
    nn.functional.cross_entropy(hand(x), y).backward()
    hand.reduce_gradients()
    opt.step()
    hand.replicate()
    for a, b in zip(hand.module.head.parameters(), hand.replicas[1].head.parameters()):
        assert torch.equal(a, b) and a.data_ptr() != b.data_ptr()
    assert len(list(hand.parameters())) == len(list(hand.module.parameters()))  # replicas are not submodules
    hand.close()


def test_stage_by_stage_forwards_match_the_plain_ones():
    torch.manual_seed(0)
    model = build_classifier("squeezenet1_0", hidden=16).eval()
    x = torch.randn(4, 3, 32, 32)
    stages: list[tuple[str, str]] = []
    with torch.no_grad():
        expected = model(x)
        out = dp_forward(nn.DataParallel(model), x, lambda phase, stage: stages.append((phase, stage)))
        hand = HandDataParallel(copy.deepcopy(model), ["cpu", "cpu"]).eval()
        out2 = hand.timed_forward(x, lambda phase, stage: stages.append((phase, stage)))
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(out2, expected)
    assert ("forward", "parallel_apply") in stages and ("comm", "gather") in stages and ("comm", "replicate") in stages
    hand.close()


def test_sync_volume_is_n_over_bk_times_parameters():
    vgg = 119_586_826
    v = sync_volume(60_000, 32, 4, vgg)
    assert v["iterations_per_epoch"] == 60_000 / 128
    assert v["sync_params_per_epoch"] == 60_000 / 128 * vgg
    assert v["sync_bytes_per_epoch"] == 60_000 / 128 * vgg * 4
    assert sync_volume(60_000, 32, 1, vgg)["sync_bytes_per_epoch"] == 0.0  # one GPU moves nothing


def test_an_uneven_split_is_the_whole_global_batch_and_counts_its_own_iterations():
    from trainers.frozen_backbone import process_batch

    strong = {"scaling": "strong", "global_batch": 1024}
    assert process_batch(strong, 342, 3) == 1024  # DataParallel scatters 342, 342, 340
    assert process_batch(strong, 342, 0) == 342  # ddp: one rank's share
    assert process_batch({"scaling": "weak", "images_per_gpu": 8}, 8, 3) == 24
    assert [len(c) for c in torch.zeros(1024).chunk(3)] == [342, 342, 340]
    v = sync_volume(60_000, 342, 3, 5_130, images_per_iteration=1024)
    assert v["iterations_per_epoch"] == 60_000 / 1024 and v["sync_params_per_epoch"] == 60_000 / 1024 * 5_130


def test_the_studys_gpu_counts_at_1024_run_dataparallel_at_3_and_refuse_ddp_there_alone(tmp_path):
    """gpus=1,2,3,4 at a global batch of 1,024 (the study's): DataParallel takes 3 GPUs
    (uneven split), DDP's 3-GPU point is refused with its reason and the rest is planned."""
    res = Workspace(tmp_path).launch("-m", "platform=a100", f"results_dir={tmp_path / 'res'}",
                                     "trainer=frozen_backbone", "experiment=strong_scaling",
                                     "experiment.global_batch=1024", "gpus=1,2,3,4",
                                     "trainer.params.engine=dataparallel,ddp", "dry_run=true", timeout=300)
    assert res.returncode == 0, res.stderr
    refused = [ln for ln in (res.stdout + res.stderr).splitlines() if ln.startswith("refused:")]
    assert len(refused) == 1 and "gpus=3 trainer.params.engine=ddp" in refused[0]
    assert refused[0].endswith("engine=ddp gives each of its 3 ranks an equal share and experiment.global_batch=1024 "
                               "does not split over 3 GPUs; use a multiple of 3, or engine=dataparallel or vanilla "
                               "(splits it unevenly)")
    assert "7 point(s)" in res.stdout
    row = [ln.split() for ln in res.stdout.splitlines() if ln.split()[:1] == ["4"]][0]
    assert row[2] == "3" and row[6:9] == ["dataparallel", "342", "1024"]  # img/GPU: the largest share
    assert not (tmp_path / "res" / "campaign.db").exists()


# ---------------------------------------------------------------------------- launch-time rules


def _config(engine=None, gpus=1, nodes=1, device="cpu", trainer="frozen_backbone", **params):
    if engine:
        params["engine"] = engine
    return {"trainer": {"name": trainer, "params": params}, "gpus": gpus, "nodes": nodes,
            "platform": {"name": "local" if device == "cpu" else "a100", "device": device},
            "container": {"runtime": "none"}}


@pytest.mark.parametrize("config,message", [
    (_config("dataparallel", gpus=2),
     "engine=dataparallel splits each batch over CUDA devices in one process; platform=local runs on CPU, "
     "so use gpus=1 or engine=ddp"),
    (_config("vanilla", gpus=8, nodes=2, device="cuda"),
     "engine=vanilla drives all GPUs from one process on one node; nodes=2 needs engine=ddp"),
    (_config("horovod"), "unknown trainer.params.engine 'horovod' for trainer=frozen_backbone; "
                         "valid: ddp, dataparallel, vanilla"),
    (_config("ddp", mode="inference"), "mode=inference compares dataparallel and vanilla; engine=ddp runs mode=train only"),
    (_config("vanilla", mode="eval"), "unknown trainer.params.mode 'eval' for trainer=frozen_backbone; "
                                      "valid: train, inference"),
])
def test_engine_refusals(config, message):
    with pytest.raises(ConfigError) as err:
        check_engine(config)
    assert str(err.value) == message


def test_engines_allowed_and_process_layout():
    for engine in ("dataparallel", "vanilla"):
        check_engine(_config(engine, gpus=1))
        check_engine(_config(engine, gpus=4, device="cuda"))
        assert check_trainer(_config(engine, gpus=4, device="cuda")).single_process
    check_engine(_config("ddp", gpus=2))
    assert not check_trainer(_config("ddp", gpus=2)).single_process
    assert not check_trainer(_config(gpus=2)).single_process  # ddp by default
    assert not check_trainer(_config(trainer="synthetic")).single_process


def test_engine_rules_import_no_torch():
    code = "import sys, campaign.launch.validate; print([m for m in ('torch', 'deepspeed') if m in sys.modules])"
    out = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "[]"


# ---------------------------------------------------------------------------- through campaign


def launch(cwd: Path, *overrides: str) -> Result:
    """``python -m campaign.launch -m platform=local ...`` in ``cwd`` (forked from the suite's
    preloaded server: tests/forkserver.py), store in cwd/res."""
    return Workspace(cwd).launch("-m", "platform=local", f"results_dir={cwd / 'res'}", "experiment=smoke", *overrides,
                                 timeout=300)


def wait_and_read(cwd: Path) -> list[dict]:
    """Wait for the campaign; its iteration rows joined with their point's engine and gpus."""
    store = cwd / "res" / "campaign.db"
    done = Workspace(cwd).campaign("status", "--wait", "--interval", "0.5", "--store", f"sqlite:///{store}",
                                   timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    with sqlite3.connect(store) as db:
        db.row_factory = sqlite3.Row
        return [dict(r) for r in db.execute(
            "SELECT p.gpus, p.config, i.* FROM iteration i JOIN attempt a ON a.id = i.attempt_id "
            "JOIN point p ON p.id = a.point_id")]


def engines_seen(rows: list[dict]) -> set:
    return {(json.loads(r["config"])["trainer"]["params"]["engine"], r["gpus"]) for r in rows}


def phases_of(cwd: Path) -> set[str]:
    with sqlite3.connect(cwd / "res" / "campaign.db") as db:
        return {r[0] for r in db.execute("SELECT phase FROM breakdown")}


# The module's campaigns, launched together (their jobs overlap) and read by the tests below.
# A 2-rank point where the check is about two ranks (ddp's); the single-process engines train
# on the trainer's own unnamed dataset; DDP at one rank runs in tests/test_dataparallel_definitions.py's
# campaign and tests/test_convergence_e2e.py's.
CAMPAIGNS = {
    "ddp": ["gpus=2", "trainer=frozen_backbone", "dataset=mnist", "dataset.root={mnist}", "trainer.params.engine=ddp",
            "trainer.params.loss_threshold=100", *TINY],
    "single": ["gpus=1", "trainer=frozen_backbone", "dataset.length=32", "trainer.params.engine=dataparallel,vanilla",
               *TINY],  # no dataset named
    "inference": ["gpus=1", "trainer=frozen_backbone", "dataset=synthetic", "dataset.length=32",
                  "trainer.params.engine=vanilla", "trainer.params.mode=inference", "experiment.images_per_gpu=2,4",
                  *TINY],
}


@pytest.fixture(scope="module")
def engine_runs(tmp_path_factory) -> dict[str, tuple[Path, list[dict]]]:
    """name -> (its folder, its iteration rows), for each of CAMPAIGNS."""
    root = tmp_path_factory.mktemp("engines")
    write_mnist(root / "mnist", n=32)
    for name, overrides in CAMPAIGNS.items():
        (root / name).mkdir()
        res = launch(root / name, *(o.format(mnist=root / "mnist") for o in overrides))
        assert res.returncode == 0, res.stderr
    return {name: (root / name, wait_and_read(root / name)) for name in CAMPAIGNS}


@pytest.mark.slow
def test_ddp_on_mnist_two_ranks(engine_runs):
    folder, rows = engine_runs["ddp"]
    assert engines_seen(rows) == {("ddp", 2)}
    assert {r["rank"] for r in rows} == {0, 1}
    assert all(r["forward_s"] is not None and r["comm_s"] is not None and r["loss"] is not None for r in rows)
    assert {"ddp.forward", "ddp.backward", "ddp.step"} <= phases_of(folder)


@pytest.mark.slow
def test_single_process_engines_train(engine_runs):
    folder, rows = engine_runs["single"]
    assert engines_seen(rows) == {("dataparallel", 1), ("vanilla", 1)}
    assert all(r["forward_s"] is not None and r["comm_s"] is not None for r in rows)
    assert {"vanilla.replicate", "vanilla.parallel_apply", "vanilla.gather", "vanilla.reduce_gradients",
            "dataparallel.scatter", "dataparallel.parallel_apply", "dataparallel.gather"} <= phases_of(folder)


@pytest.mark.slow
def test_inference_runs_forward_only_one_point_per_batch_size(engine_runs):
    _, rows = engine_runs["inference"]
    assert len({r["config"] for r in rows}) == 2  # one point per batch size
    assert all(r["forward_s"] is not None and r["comm_s"] is not None and r["backward_s"] is None for r in rows)


@pytest.mark.slow
def test_its_study_dataset_unnamed_trains_on_synthetic_grey_digits(engine_runs):
    """No dataset named: MNIST's shapes (1 channel, 28x28, 10 classes) as synthetic
    batches, which the trainer resizes to its backbone's 3-channel input, and it trains."""
    folder, rows = engine_runs["single"]
    assert rows and all(r["loss"] is not None and r["forward_s"] is not None for r in rows)
    for row in rows:
        data = json.loads(row["config"])["dataset"]
        assert (data["name"], data["channels"], data["image_size"], data["num_classes"]) == ("synthetic", 1, 28, 10)
    with sqlite3.connect(folder / "res" / "campaign.db") as db:
        assert {r[0] for r in db.execute("SELECT dataset FROM point")} == {"synthetic"}


@pytest.mark.parametrize("overrides,message", [
    (["gpus=2", "trainer.params.engine=dataparallel"],
     "engine=dataparallel splits each batch over CUDA devices in one process; platform=local runs on CPU, "
     "so use gpus=1 or engine=ddp"),
    (["gpus=1,2", "trainer.params.engine=vanilla"], "engine=vanilla splits each batch over CUDA devices"),
    (["trainer.params.engine=ddp", "trainer.params.mode=inference"], "mode=inference compares dataparallel and vanilla"),
])
def test_refused_at_launch_with_one_line(tmp_path, overrides, message):
    res = launch(tmp_path, "trainer=frozen_backbone", *overrides)
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0]
    assert not (tmp_path / "res" / "campaign.db").exists()
