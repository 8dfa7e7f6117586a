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
    assert said.stdout.splitlines()[1].startswith(
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
        assert (p["schedule"]["batch_per_gpu"], p["schedule"]["iterations"]) == (2, 32 // _gpus(p))
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
