"""One registry for datasets (campaign_datasets): a dataset is one torch-free declaration
(its folder, its checks, channels, classes, its loader) that the launch validates and the
job loads from, plus its conf file in conf/dataset/. Adding one is one registration:
proved here with a toy dataset that lives only in this test's folder, accepted by a
launch's dry run and loaded by the trainers' data path."""

from __future__ import annotations

import importlib
import pkgutil
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

import campaign_datasets
from campaign.catalogue.datasets import check_dataset
from campaign.common.errors import ConfigError
from campaign_datasets import DatasetDef

ROOT = Path(__file__).resolve().parents[1]

TOY_MODULE = '''
"""dataset=toy: N grey 4x4 images of 3 classes, N written in <root>/toy.txt."""

import os

from campaign_datasets import DatasetDef, DatasetError, resolve_root


def check(folder, where, spec):
    if not os.path.isfile(os.path.join(folder, "toy.txt")):
        raise DatasetError(f"{where}: no toy.txt in {folder}; write the number of images there")


def load(spec, *, train, image_size, channels, fraction, seed):
    import torch
    from torch.utils.data import TensorDataset

    with open(os.path.join(resolve_root(spec), "toy.txt")) as f:
        n = max(1, round(int(f.read()) * fraction))
    images = torch.arange(n, dtype=torch.float32).view(n, 1, 1, 1).expand(n, channels, image_size, image_size)
    return TensorDataset(images.contiguous(), torch.arange(n) % 3)


DATASET = DatasetDef("toy", check=check, channels=(1,), num_classes=3, loader=load)
'''

# What a launch does with it: the module registers it, a ConfigStore node stands for its
# conf/dataset/toy.yaml, then `python -m campaign.launch` runs as a user would run it.
DRIVER = '''
import runpy, sys

from hydra.core.config_store import ConfigStore

import campaign_datasets
from campaign.catalogue.config import DatasetSpec

if sys.argv[1] == "register":
    import toy_dataset

    campaign_datasets.register(toy_dataset.DATASET)
ConfigStore.instance().store(group="dataset", name="toy",
                             node=DatasetSpec(name="toy", image_size=4, channels=1, num_classes=3))
sys.argv = ["python -m campaign.launch", *sys.argv[2:]]
runpy.run_module("campaign.launch", run_name="__main__", alter_sys=True)
'''


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """The toy module (importable from tmp_path/code) and a folder holding 12 toy images."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "toy_dataset.py").write_text(textwrap.dedent(TOY_MODULE))
    monkeypatch.syspath_prepend(str(code))
    module = importlib.import_module("toy_dataset")
    data = tmp_path / "toy"
    data.mkdir()
    (data / "toy.txt").write_text("12")
    yield module, data
    campaign_datasets.unregister("toy")  # the registry as the next test expects it
    sys.modules.pop("toy_dataset", None)


def test_a_new_dataset_is_one_registration_checked_by_the_host_and_loaded_by_the_job(toy, tmp_path):
    module, data = toy
    with pytest.raises(ConfigError, match="unknown dataset 'toy'; available: ade20k, "):
        check_dataset({"name": "toy", "root": str(data)})
    campaign_datasets.register(module.DATASET)
    assert "toy" in campaign_datasets.names()

    # the host: the registry's own checks (root, channels, classes), then the toy's
    check_dataset({"name": "toy", "root": str(data), "channels": 1, "num_classes": 3})
    for section, message in [
        ({"name": "toy"}, "dataset.root is required for dataset=toy"),
        ({"name": "toy", "root": str(data), "channels": 3}, "dataset.channels=3 is not supported for dataset=toy; "
                                                            "available: 1"),
        ({"name": "toy", "root": str(data), "num_classes": 2}, "dataset.num_classes=2 but toy has 3 classes; "
                                                               "set dataset.num_classes=3"),
        ({"name": "toy", "root": str(tmp_path)}, f"dataset.root={tmp_path}: no toy.txt in {tmp_path}; "
                                                 "write the number of images there"),
    ]:
        with pytest.raises(ConfigError) as info:
            check_dataset(section)
        assert str(info.value) == message

    # the job: the same declaration names its loader; the data path shards it as any other
    pytest.importorskip("torch")
    from trainers.data import EpochBatches, build_dataset, build_loader, loader_of

    section = {"name": "toy", "root": str(data), "fraction": 0.5}
    train = build_dataset(section, train=True, image_size=4, channels=1, seed=0)
    assert len(train) == 6 and len(build_dataset(section, train=False, image_size=4, channels=1)) == 12
    batches = EpochBatches(build_loader(train, batch_size=3, rank=1, world_size=2, seed=0, num_workers=0))
    images, labels = batches.next()
    assert tuple(images.shape) == (3, 1, 4, 4) and labels.tolist() == [int(x) % 3 for x in images[:, 0, 0, 0]]
    with pytest.raises(ValueError, match=r"unknown dataset 'nosuch'; available: cifar10, cifar100, imagefolder, "
                                         r"mnist, synthetic, toy$"):
        loader_of("nosuch")


def test_a_launch_accepts_a_registered_dataset_and_runs_its_checks(ws, toy, tmp_path):
    _, data = toy
    driver = tmp_path / "code" / "launch_with_toy.py"
    driver.write_text(textwrap.dedent(DRIVER))
    ws.env["PYTHONPATH"] = f"{tmp_path / 'code'}:{ROOT}"

    def dry_run(mode: str, root: Path) -> str:
        res = ws.run(sys.executable, str(driver), mode, "dataset=toy", f"dataset.root={root}", "--dry-run")
        assert res.returncode == 0, res.stderr
        assert res.stdout.startswith("dry run: 1 point(s)"), res.stdout
        return res.stdout

    assert "note:" not in dry_run("register", data)  # unregistered: "unknown dataset 'toy'" (test above)
    assert (f"note: would be refused here: dataset.root={tmp_path}: no toy.txt in {tmp_path}; "
            "write the number of images there") in dry_run("register", tmp_path)


def test_a_name_is_registered_once():
    with pytest.raises(ValueError, match="dataset 'mnist' is already registered"):
        campaign_datasets.register(DatasetDef("mnist"))
    with pytest.raises(TypeError, match="register\\(\\) takes DatasetDef declarations, not dict"):
        campaign_datasets.register({"name": "toy"})
    assert campaign_datasets.find("toy") is None


def test_every_builtin_has_its_module_its_conf_file_and_a_loader_that_imports():
    """One module per dataset in campaign_datasets and one conf file per dataset in conf/dataset."""
    conf = {p.stem: yaml.safe_load(p.read_text()) for p in (ROOT / "conf" / "dataset").glob("*.yaml")}
    assert {name: c["name"] for name, c in conf.items()} == {n: n for n in campaign_datasets.names()}
    declared = {}
    for info in pkgutil.iter_modules(campaign_datasets.__path__):
        for dataset in getattr(importlib.import_module(f"campaign_datasets.{info.name}"), "DATASETS", ()):
            declared[dataset.name] = dataset
    assert declared == {n: campaign_datasets.find(n) for n in campaign_datasets.names()}
    assert all(d.loader is None or isinstance(d.loader, str) for d in declared.values())  # the host never imports it
    pytest.importorskip("torch")
    from trainers.data import loader_of

    for name in campaign_datasets.names():
        if campaign_datasets.find(name).loader is None:
            with pytest.raises(ValueError, match=f"dataset={name} is read by .*, not by trainers.data"):
                loader_of(name)
        else:
            assert callable(loader_of(name)), name
