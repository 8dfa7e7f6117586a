"""A published study is one command (issue #39): ``study=swinv2_thesis`` is the reference
study's grid (Table 2's four partitions x Table 3's 1/2/4/8 GPUs at 160K/N iterations of 8
images per GPU, the profiler over 8 iterations), its 8-GPU points on 4-GPU nodes refused
with the study's own sentence, its dataset read from files; ``study=swinv2_thesis_small``
is the same grid reduced, on a stand-in the launch writes. The stand-ins themselves
(``campaign datagen``) are read by the real loaders' checks.

The study's text is ../shared/reference/swinv2-ddp-scalability-thesis.txt
(``$CAMPAIGN_REFERENCE_TEXT`` elsewhere); the test that quotes it is skipped without it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from campaign_datasets import check_dataset
from campaign_datasets.standin import ADE_SHAPES, SIZES, has_files, is_standin, write_standin
from conftest import Workspace

REPO = Path(__file__).resolve().parent.parent
STUDY = Path(os.environ.get("CAMPAIGN_REFERENCE_TEXT")
             or REPO.parent / "shared" / "reference" / "swinv2-ddp-scalability-thesis.txt")
GRID = {("v100", 1), ("v100", 2), ("v100", 4), ("a100", 1), ("a100", 2), ("a100", 4),
        *((p, n) for p in ("a100_nvlink_40", "a100_nvlink_80") for n in (1, 2, 4, 8))}


def _image(folder: Path, name: str, cuda: str, arch: str) -> Path:
    """An image file and the record singularity/build.sh writes beside it (tests/test_arch.py)."""
    folder.mkdir(parents=True, exist_ok=True)
    img = folder / name
    img.write_bytes(b"SIF fake")
    (folder / (name + ".sha256")).write_text(
        f"{'a' * 64}  {name}\n# torch_version 2.14.1\n# cuda_version {cuda}\n# cuda_arch_list {arch}\n")
    return img


def _gpus(point: dict) -> int:
    return point["resources"]["nodes"] * point["resources"]["gpus_per_node"]


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    """The study's dry run on a laptop planning for its cluster: the study's two images (the
    CUDA 12.6 one for the V100s), its ADE20K folder (a stand-in of the tests size)."""
    ws = Workspace(tmp_path_factory.mktemp("study")).away_from_slurm()
    images = ws.path / "images"
    cu13 = _image(images, "campaign.sif", "13.0", "sm_75 sm_80 sm_86 sm_90 sm_100 sm_120")
    cu126 = _image(images, "campaign-cu126.sif", "12.6", "sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90")
    write_standin("ade20k", ws.path / "ade", "tests")
    res = ws.launch("-m", "study=swinv2_thesis", f"dataset.root={ws.path / 'ade'}", "container=apptainer",
                    f"container.image={cu13}", f"+container.images.v100={cu126}", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    points = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
    return ws, res, points


def test_the_preset_is_table_2_by_table_3(planned):
    ws, res, points = planned
    assert {(p["config"]["platform"]["name"], _gpus(p)) for p in points} == GRID
    for p in points:
        c, n, s = p["config"], _gpus(p), p["schedule"]
        assert (p["resources"]["nodes"], s["batch_per_gpu"], s["iterations"]) == (1, 8, 160_000 // n)
        assert c["experiment"]["profile_iterations"] == 8 and c["experiment"]["validation"] is False
        assert c["trainer"]["name"] == "swinv2_upernet" and c["trainer"]["params"]["variant"] == "base"
        assert c["trainer"]["params"]["loop"] == "stock"  # MMEngine's loop, as the study ran it
        assert c["dataset"]["name"] == "ade20k" and c["dataset"]["num_workers"] == 4  # files, CPU workers
        assert "study=swinv2_thesis" in p["overrides"]
    assert not (ws.results).exists()  # a dry run makes nothing


def test_the_points_the_study_did_not_gather_are_refused_in_its_words(planned):
    _, res, _ = planned
    refused = [line for line in res.stderr.splitlines() if line.startswith("refused: point")]
    assert [line.split(":")[1].split()[1:3] for line in refused] == [["platform=v100", "gpus=8"],
                                                                       ["platform=a100", "gpus=8"]]
    quote = "Due to the limit of 4 GPUs per node on CRC V100 and CRC A100, training time for 8 GPUs on these platforms is not gathered"
    assert all(quote in line and "section 4.2" in line for line in refused)
    if STUDY.is_file():
        assert quote in STUDY.read_text()


def test_the_command_line_narrows_the_grid(tmp_path):
    ws = Workspace(tmp_path).away_from_slurm()
    res = ws.launch("-m", "study=swinv2_thesis", "platform=a100_nvlink_80", "gpus=4,8", "dataset.root=/data",
                    "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    points = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
    assert [(p["config"]["platform"]["name"], _gpus(p), p["schedule"]["iterations"]) for p in points] == [
        ("a100_nvlink_80", 4, 40_000), ("a100_nvlink_80", 8, 20_000)]
    said = ws.launch("-m", "study=swinv2_thesis", "platform=a100_nvlink_80", "gpus=4,8", "dataset.root=/data",
                     "--dry-run")
    head = next(line for line in said.stdout.splitlines() if line.startswith("every point: "))  # after the design
    assert head.startswith(
        "every point: study=swinv2_thesis (Garrett, Evaluation of Scalability for Distributed Data-Parallel Training "
        "of Swin Transformer V2 (M.S. thesis, University of Pittsburgh, 2023)) trainer=swinv2_upernet "
        "experiment=weak_scaling dataset=ade20k 512px 150 classes")


def test_without_its_dataset_the_study_is_refused_not_synthetic(tmp_path):
    ws = Workspace(tmp_path).away_from_slurm()
    res = ws.launch("-m", "study=swinv2_thesis", "platform=a100_nvlink_80", "gpus=1")
    assert res.returncode == 2
    assert res.stderr.strip().splitlines()[-1] == (
        "error: study=swinv2_thesis reads ade20k from files, as the study did (dataset.root is not set); name its "
        "folder (dataset.root=/path/to/ade20k) or write a stand-in there first (campaign datagen ade20k --out DIR "
        "--size full)")
    assert not ws.db.exists()
    dry = ws.launch("-m", "study=swinv2_thesis", "platform=a100_nvlink_80", "gpus=1", "--dry-run")
    assert dry.returncode == 0 and "dataset=ade20k 512px 150 classes" in dry.stdout
    assert "note: would be refused here: study=swinv2_thesis reads ade20k from files" in dry.stdout


def test_the_small_twin_shares_the_grid_and_says_what_it_would_write(tmp_path):
    ws = Workspace(tmp_path).away_from_slurm()
    res = ws.launch("-m", "study=swinv2_thesis_small", "platform.compute_capability=null", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    points = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
    assert {(p["config"]["platform"]["name"], _gpus(p)) for p in points} == GRID
    for p in points:
        c = p["config"]
        assert (p["schedule"]["batch_per_gpu"], p["schedule"]["iterations"]) == (2, 16 // _gpus(p))
        assert c["trainer"]["params"]["variant"] == "micro" and c["dataset"]["image_size"] == 64
        assert c["trainer"]["params"]["loop"] == "stock"
        assert c["dataset"]["root"] == str(ws.results / "datasets" / "ade20k-standin")
    assert f"note: would write a small stand-in of ade20k (campaign datagen ade20k --out " \
           f"{ws.results / 'datasets' / 'ade20k-standin'} --size small)" in res.stderr
    assert not ws.results.exists()


# ---------------------------------------------------------------- the stand-ins


@pytest.mark.parametrize("name", sorted(SIZES))
def test_a_stand_in_is_what_the_real_loaders_check(name, tmp_path):
    folder = write_standin(name, tmp_path, "tests")
    assert has_files(name, tmp_path) and is_standin(folder)
    check_dataset({"name": name, "root": str(tmp_path)}, test_split=True)  # raises on a malformed one


def test_an_ade20k_stand_in_has_ade20k_sizes_and_labels(tmp_path):
    from PIL import Image

    folder = write_standin("ade20k", tmp_path, "tests")
    images = sorted((folder / "images" / "training").glob("*.jpg"))
    assert len(images) == SIZES["ade20k"]["tests"][0]
    shapes = {(w, h) for w, h, _ in ADE_SHAPES}
    for img in images:
        with Image.open(img) as im:
            assert im.format == "JPEG" and im.mode == "RGB" and im.size in shapes
        with Image.open(folder / "annotations" / "training" / (img.stem + ".png")) as ann:
            labels = np.asarray(ann)
            assert ann.format == "PNG" and ann.mode == "L" and labels.shape == im.size[::-1]
            assert labels.max() <= 150  # 150 classes and 0, "other"
    assert len({Image.open(i).size for i in images}) > 1  # not one size: drawn as ADE20K's are


def test_datagen_writes_once_and_refuses_bad_input(tmp_path):
    ws = Workspace(tmp_path)
    res = ws.campaign("datagen", "mnist", "--out", "data/mnist", "--size", "tests")
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == (f"wrote a tests stand-in of mnist at data/mnist/MNIST/raw; "
                                  f"launch with dataset.root=data/mnist")
    before = (tmp_path / "data/mnist/MNIST/raw/train-images-idx3-ubyte").read_bytes()
    again = ws.campaign("datagen", "mnist", "--out", "data/mnist", "--size", "small")
    assert again.returncode == 2 and again.stderr.strip() == (
        "error: data/mnist holds mnist already; nothing was written (remove it first, or choose another --out)")
    assert (tmp_path / "data/mnist/MNIST/raw/train-images-idx3-ubyte").read_bytes() == before
    bad = ws.campaign("datagen", "imagenet", "--out", "x")
    assert bad.returncode == 2 and "invalid choice: 'imagenet'" in bad.stderr and "Traceback" not in bad.stderr
    (tmp_path / "afile").write_text("")
    onfile = ws.campaign("datagen", "cifar10", "--out", "afile")
    assert onfile.returncode == 2 and onfile.stderr.strip() == "error: --out afile is a file, not a folder; choose another --out"


# ---------------------------------------------------------------- the companion studies (issue #40)


def _json_points(ws: Workspace, *overrides: str) -> tuple[list[dict], str]:
    res = ws.launch("-m", *overrides, "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    return [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")], res.stderr


def _axis(point: dict, key: str) -> str:
    """The value a point's overrides give ``key`` (its sweep's)."""
    return next(o.split("=", 1)[1] for o in point["overrides"] if o.split("=", 1)[0] == key)


def test_the_studies_hardware_holds_their_points(tmp_path):
    ws = Workspace(tmp_path).away_from_slurm()
    vit, _ = _json_points(ws, "platform=t4", "gpus=8", "trainer=vit")  # the ViT study's 8 T4s of one node
    assert [(p["config"]["platform"]["gpu_model"], _gpus(p), p["resources"]["nodes"]) for p in vit] == [("Tesla T4", 8, 1)]
    dp, _ = _json_points(ws, "platform=a6000", "gpus=1,2,3,4", "trainer=frozen_backbone")
    assert [(p["config"]["platform"]["gpu_model"], _gpus(p)) for p in dp] == [("NVIDIA RTX A6000", n) for n in (1, 2, 3, 4)]


def test_the_vit_study_is_its_t4_grid(tmp_path):
    ws = Workspace(tmp_path).away_from_slurm()
    points, _ = _json_points(ws, "study=vit_deepspeed", "dataset.root=/data/cifar")
    grid = {(_axis(p, "experiment"), _axis(p, "dataset"), _axis(p, "trainer.params.engine"),
             int(_axis(p, "experiment.images_per_gpu")), _gpus(p)) for p in points}
    want = {(e, d, eng, 64, n) for e in ("vit_strong", "vit_weak") for d in ("cifar10", "cifar100")
            for eng in ("deepspeed", "ddp") for n in (1, 2, 4, 8)}
    want |= {("vit_strong", "cifar100", "deepspeed", 16, n) for n in (1, 2, 4, 8)}  # Fig 12's batch 16
    assert grid == want and len(points) == len(want)  # each point once
    for p in points:
        assert p["config"]["platform"]["name"] == "t4" and p["resources"]["nodes"] == 1
        assert p["config"]["trainer"]["params"]["zero_stage"] == 0 and p["config"]["experiment"]["validation"]


def test_the_dataparallel_study_varies_one_factor_at_a_time(tmp_path):
    ws = Workspace(tmp_path).away_from_slurm()
    points, stderr = _json_points(ws, "study=dataparallel_a6000", "dataset.root=/data/mnist")
    defaults = {"gpus": "4", "experiment.global_batch": "1024", "trainer.params.backbone": "vgg16",
                "trainer.params.hidden": "4096"}
    seen = set()
    for p in points:
        assert p["config"]["platform"]["name"] == "a6000" and p["config"]["dataset"]["name"] == "mnist"
        values = {k: _axis(p, k) for k in defaults}
        changed = {k for k in defaults if values[k] != defaults[k]}
        if _axis(p, "trainer.params.mode") == "inference":  # Fig 4: the batch, native vs vanilla
            assert changed <= {"experiment.global_batch"} and _axis(p, "trainer.params.engine") in ("dataparallel", "vanilla")
        else:
            assert len(changed) <= 1, values  # section 4: "Only one factor is changed each time"
            assert _axis(p, "trainer.params.engine") in ("dataparallel", "ddp")
        seen.add(tuple(sorted(p["overrides"])))
    assert len(seen) == len(points)  # a point two grids make is run once
    # "we load the pretrained weights for these models": torchvision's, one file per backbone
    assert {p["config"]["trainer"]["params"]["weights"] for p in points} == {"DEFAULT"}
    notes = [line for line in stderr.splitlines() if line.startswith("note: trainer.params.weights=DEFAULT")]
    assert len(notes) == 5 and all("https://download.pytorch.org/models/" in n for n in notes)
    assert {_axis(p, "trainer.params.backbone") for p in points} == {"squeezenet1_0", "alexnet", "resnet18",
                                                                     "densenet121", "vgg16"}
    assert {_axis(p, "trainer.params.hidden") for p in points} == {"4096", "2048", "1024"}
    assert {_gpus(p) for p in points} == {1, 2, 3, 4}
    assert {_axis(p, "experiment.global_batch") for p in points} == {"32", "64", "128", "256", "512", "1024"}
    # 3 GPUs: nn.DataParallel alone (DDP cannot split 1,024 over 3 ranks); nothing refused
    assert {_axis(p, "trainer.params.engine") for p in points if _gpus(p) == 3} == {"dataparallel"}
    assert not [line for line in stderr.splitlines() if line.startswith("refused:")]


@pytest.mark.parametrize("study,count", [("vit_deepspeed_small", 10), ("dataparallel_a6000_small", 10)])
def test_the_companion_twins_are_their_grids_reduced(study, count, tmp_path):
    ws = Workspace(tmp_path).away_from_slurm()
    points, stderr = _json_points(ws, f"study={study}")
    assert len(points) == count
    for p in points:
        assert p["config"]["dataset"]["root"].startswith(str(ws.results / "datasets"))
        assert p["resources"]["partition"] == "a100" and p["resources"]["cpus_per_task"] == 1
    assert "note: would write a full stand-in of" in stderr and not ws.results.exists()


def test_the_dataparallel_dry_run_names_the_studys_trainable_parameters(tmp_path):
    """Section 4: "SqueezeNet10 (5130 params), AlexNet (54575114 params), ResNet18 (5130 params),
    DenseNet121 (21020682 params), VGG16 (119586826 params)" and VGG16's 55599114, 26750986."""
    ws = Workspace(tmp_path).away_from_slurm()
    points, _ = _json_points(ws, "study=dataparallel_a6000", "dataset.root=/data/mnist")
    counts = {(_axis(p, "trainer.params.backbone"), _axis(p, "trainer.params.hidden")): p["trainable_parameters"]
              for p in points}
    assert counts == {("vgg16", "4096"): 119_586_826, ("vgg16", "2048"): 55_599_114, ("vgg16", "1024"): 26_750_986,
                      ("alexnet", "4096"): 54_575_114, ("densenet121", "4096"): 21_020_682,
                      ("resnet18", "4096"): 5_130, ("squeezenet1_0", "4096"): 5_130}
    table = ws.launch("-m", "study=dataparallel_a6000", "dataset.root=/data/mnist", "--dry-run").stdout
    header = next(line for line in table.splitlines() if line.lstrip().startswith("#  platform"))  # after the design
    assert "trainable" in header and "119,586,826" in table


def test_the_declared_counts_are_the_built_models():
    """The torch-free count (trainers/specs/frozen_backbone.py) against the heads the trainer builds,
    on the meta device (no memory, no weights)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("torchvision")
    from trainers.models.classifier import _builder, _strip_head, make_head
    from trainers.specs.frozen_backbone import FEATURES, trainable_parameters

    for name, features in FEATURES.items():
        with torch.device("meta"):
            _, built = _strip_head(name, _builder(name)())
        assert built == features, name
        for classifier, hidden in (("linear", 4096), ("mlp", 64)):
            with torch.device("meta"):
                head = make_head(built, hidden, 10, classifier)
            config = {"trainer": {"params": {"backbone": name, "classifier": classifier, "hidden": hidden}},
                      "dataset": {"num_classes": 10}}
            assert trainable_parameters(config) == sum(p.numel() for p in head.parameters()), (name, classifier)
