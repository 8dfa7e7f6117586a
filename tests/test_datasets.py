"""Host checks (campaign.catalogue.datasets) and job-side datasets (trainers.data) on generated data
written in the real on-disk formats (tests/datagen.py)."""

from __future__ import annotations

import gzip
import os
import pickle
import struct
import subprocess
import sys

import pytest

from campaign.catalogue.config import DatasetSpec
from campaign.catalogue.datasets import check_dataset, resolve_root
from campaign.common.errors import ConfigError

try:
    from tests.datagen import write_ade20k, write_cifar10, write_cifar100, write_imagefolder, write_mnist
except ImportError:  # tests/ on sys.path as a rootdir folder rather than a package
    from datagen import write_ade20k, write_cifar10, write_cifar100, write_imagefolder, write_mnist

torch = pytest.importorskip("torch")
from trainers.data import build_dataset, build_loader, share_indices  # noqa: E402


def refused(spec) -> str:
    with pytest.raises(ConfigError) as info:
        check_dataset(spec)
    message = str(info.value)
    assert "\n" not in message
    return message


# ---------------------------------------------------------------------------- host side


def test_host_module_imports_stdlib_only():
    code = ("import sys, campaign.catalogue.datasets; "
            "bad = [m for m in ('torch', 'numpy', 'PIL') if m in sys.modules]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_shared_layouts_import_neither_side():
    """campaign_datasets is what the launch and the jobs share: it imports nothing of
    either (nor torch, numpy, PIL), so neither side depends on the other through it."""
    code = ("import sys, campaign_datasets; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('torch', 'numpy', 'PIL', 'campaign', 'trainers')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_synthetic_needs_nothing():
    check_dataset(DatasetSpec())
    assert resolve_root(DatasetSpec()) == ""


def test_unknown_name_lists_choices():
    assert refused({"name": "imagenet"}) == (
        "unknown dataset 'imagenet'; available: ade20k, cifar10, cifar100, imagefolder, mnist, synthetic")


def test_root_required_and_must_exist(tmp_path):
    assert refused(DatasetSpec(name="cifar10")) == "dataset.root is required for dataset=cifar10"
    missing = tmp_path / "nope"
    assert refused(DatasetSpec(name="mnist", root=str(missing))) == (
        f"dataset.root={missing}: no such directory; point dataset.root at the folder holding mnist "
        f"or use dataset=synthetic")


@pytest.mark.parametrize("gz", [False, True])
def test_mnist_accepted_flat_and_gz(tmp_path, gz):
    write_mnist(tmp_path, gz=gz)
    check_dataset(DatasetSpec(name="mnist", root=str(tmp_path)))
    assert resolve_root({"name": "mnist", "root": str(tmp_path)}) == str(tmp_path)


def test_mnist_accepted_torchvision_layout(tmp_path):
    raw = write_mnist(tmp_path / "MNIST" / "raw")
    check_dataset({"name": "mnist", "root": str(tmp_path)})
    assert resolve_root({"name": "mnist", "root": str(tmp_path)}) == str(raw)


def test_mnist_missing(tmp_path):
    assert refused(DatasetSpec(name="mnist", root=str(tmp_path))) == (
        f"dataset.root={tmp_path}: no MNIST files (train-images-idx3-ubyte[.gz]) found; "
        f"download MNIST there or use dataset=synthetic")


def test_mnist_missing_labels(tmp_path):
    write_mnist(tmp_path)
    os.remove(tmp_path / "train-labels-idx1-ubyte")
    assert refused(DatasetSpec(name="mnist", root=str(tmp_path))) == (
        f"dataset.root={tmp_path}: train-labels-idx1-ubyte[.gz] missing in {tmp_path}; "
        f"download MNIST there or use dataset=synthetic")


def test_mnist_wrong_magic(tmp_path):
    write_mnist(tmp_path)
    path = tmp_path / "train-images-idx3-ubyte"
    path.write_bytes(struct.pack(">I", 2049) + path.read_bytes()[4:])
    assert refused(DatasetSpec(name="mnist", root=str(tmp_path))) == (
        f"dataset.root={tmp_path}: {path} has magic number 2049, expected 2051; re-download MNIST")


def test_mnist_truncated_header(tmp_path):
    write_mnist(tmp_path)
    path = tmp_path / "train-images-idx3-ubyte"
    path.write_bytes(path.read_bytes()[:10])
    assert refused(DatasetSpec(name="mnist", root=str(tmp_path))) == (
        f"dataset.root={tmp_path}: {path} is truncated (header 10 of 16 bytes); re-download MNIST")


def test_mnist_truncated_body(tmp_path):
    write_mnist(tmp_path, n=64)
    path = tmp_path / "train-labels-idx1-ubyte"
    path.write_bytes(path.read_bytes()[:-4])
    assert refused(DatasetSpec(name="mnist", root=str(tmp_path))) == (
        f"dataset.root={tmp_path}: {path} holds 68 bytes, its header promises 72; re-download MNIST")


def test_mnist_count_mismatch(tmp_path):
    write_mnist(tmp_path, n=64, gz=True)
    with gzip.open(tmp_path / "train-labels-idx1-ubyte.gz", "wb") as f:
        f.write(struct.pack(">II", 2049, 60) + bytes(60))
    assert refused(DatasetSpec(name="mnist", root=str(tmp_path))) == (
        f"dataset.root={tmp_path}: train-images-idx3-ubyte.gz holds 64 images but "
        f"train-labels-idx1-ubyte.gz holds 60 labels; re-download MNIST")


def test_mnist_bad_gzip(tmp_path):
    write_mnist(tmp_path, gz=True)
    path = tmp_path / "train-images-idx3-ubyte.gz"
    path.write_bytes(b"<html>not found</html>")
    message = refused(DatasetSpec(name="mnist", root=str(tmp_path)))
    assert message.startswith(f"dataset.root={tmp_path}: cannot read {path} (")
    assert message.endswith("); re-download MNIST")


def test_num_classes_and_channels_checked(tmp_path):
    write_cifar100(tmp_path)
    assert refused(DatasetSpec(name="cifar100", root=str(tmp_path))) == (
        "dataset.num_classes=10 but cifar100 has 100 classes; set dataset.num_classes=100")
    assert refused(DatasetSpec(name="cifar100", root=str(tmp_path), num_classes=100, channels=1)) == (
        "dataset.channels=1 is not supported for dataset=cifar100; available: 3")
    assert refused({"name": "cifar100", "root": str(tmp_path), "fraction": 1.5}) == (
        "dataset.fraction=1.5 is outside (0, 1]; pick the share of the training set each point uses, "
        "e.g. dataset.fraction=0.1")


def test_cifar10_accepted_parent_or_folder(tmp_path):
    folder = write_cifar10(tmp_path)
    for root in (tmp_path, folder):
        check_dataset(DatasetSpec(name="cifar10", root=str(root)))
        assert resolve_root({"name": "cifar10", "root": str(root)}) == str(folder)


def test_cifar10_missing_batch(tmp_path):
    folder = write_cifar10(tmp_path)
    os.remove(folder / "data_batch_4")
    assert refused(DatasetSpec(name="cifar10", root=str(tmp_path))) == (
        f"dataset.root={tmp_path}: {folder / 'data_batch_4'} missing; re-download CIFAR-10 (python version)")


def test_cifar10_not_a_pickle(tmp_path):
    folder = write_cifar10(tmp_path)
    (folder / "batches.meta").write_bytes(b"<!DOCTYPE html>")
    assert refused(DatasetSpec(name="cifar10", root=str(tmp_path))) == (
        f"dataset.root={tmp_path}: {folder / 'batches.meta'} is not a Python pickle (starts with b'<!'); "
        f"re-download CIFAR-10 (python version)")


def test_cifar10_absent_binary_and_archive_hints(tmp_path):
    assert refused(DatasetSpec(name="cifar10", root=str(tmp_path))) == (
        f"dataset.root={tmp_path}: no CIFAR-10 files (cifar-10-batches-py/data_batch_1) found; "
        f"download CIFAR-10 (python version) there or use dataset=synthetic")
    (tmp_path / "cifar-10-batches-bin").mkdir()
    assert refused(DatasetSpec(name="cifar10", root=str(tmp_path))) == (
        f"dataset.root={tmp_path}: found the binary version (cifar-10-batches-bin); "
        f"download the python version (cifar-10-python.tar.gz) instead")
    (tmp_path / "cifar-10-python.tar.gz").write_bytes(b"\x1f\x8b")
    assert refused(DatasetSpec(name="cifar10", root=str(tmp_path))) == (
        f"dataset.root={tmp_path}: cifar-10-python.tar.gz is not extracted; "
        f"run `tar xzf cifar-10-python.tar.gz` in {tmp_path}")


def test_cifar100_accepted_and_missing_meta(tmp_path):
    folder = write_cifar100(tmp_path)
    check_dataset(DatasetSpec(name="cifar100", root=str(tmp_path), num_classes=100))
    os.remove(folder / "meta")
    assert refused(DatasetSpec(name="cifar100", root=str(folder), num_classes=100)) == (
        f"dataset.root={folder}: {folder / 'meta'} missing; re-download CIFAR-100 (python version)")


def test_ade20k_accepted_parent_or_folder(tmp_path):
    folder = write_ade20k(tmp_path)
    for root in (tmp_path, folder):
        check_dataset({"name": "ade20k", "root": str(root), "num_classes": 150})
        assert resolve_root({"name": "ade20k", "root": str(root)}) == str(folder)


def test_ade20k_missing_annotation(tmp_path):
    folder = write_ade20k(tmp_path, n_train=4)
    os.remove(folder / "annotations" / "training" / "ADE_train_00000002.png")
    (folder / "annotations" / "training" / "ADE_train_00000009.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    assert refused({"name": "ade20k", "root": str(tmp_path)}) == (
        f"dataset.root={tmp_path}: annotations/training/ADE_train_00000002.png missing for "
        f"images/training/ADE_train_00000002.jpg; re-extract ADEChallengeData2016.zip")


def test_ade20k_missing_annotations_folder_and_images(tmp_path):
    folder = write_ade20k(tmp_path)
    labels = folder / "annotations" / "training"
    for name in os.listdir(labels):
        os.remove(labels / name)
    os.rmdir(labels)
    assert refused({"name": "ade20k", "root": str(tmp_path)}) == (
        f"dataset.root={tmp_path}: {labels} missing (annotations of images/training); "
        f"re-extract ADEChallengeData2016.zip")
    empty = tmp_path / "empty"
    (empty / "ADEChallengeData2016" / "images" / "training").mkdir(parents=True)
    assert refused({"name": "ade20k", "root": str(empty)}) == (
        f"dataset.root={empty}: no .jpg images in {empty / 'ADEChallengeData2016' / 'images' / 'training'}; "
        f"re-extract ADEChallengeData2016.zip")


def test_ade20k_absent(tmp_path):
    assert refused({"name": "ade20k", "root": str(tmp_path)}) == (
        f"dataset.root={tmp_path}: no ADE20K files (ADEChallengeData2016/images) found; "
        f"download ADEChallengeData2016.zip there or use dataset=synthetic")


def test_imagefolder_accepted_and_refused(tmp_path):
    write_imagefolder(tmp_path, per_class=1, size=(8, 8))
    check_dataset({"name": "imagefolder", "root": str(tmp_path), "num_classes": 3})
    assert refused({"name": "imagefolder", "root": str(tmp_path), "num_classes": 2}) == (
        f"dataset.root={tmp_path}: dataset.num_classes=2 but {tmp_path / 'train'} holds 3 class folders; "
        f"set dataset.num_classes=3")
    (tmp_path / "train" / "zebra").mkdir()
    message = refused({"name": "imagefolder", "root": str(tmp_path), "num_classes": 4})
    assert message.startswith(f"dataset.root={tmp_path}: class folder {tmp_path / 'train' / 'zebra'} "
                              f"holds no image (.jpg, ")


# ---------------------------------------------------------------------------- job side


def test_mnist_dataset(tmp_path):
    write_mnist(tmp_path, n=64)
    ds = build_dataset({"name": "mnist", "root": str(tmp_path)}, train=True, image_size=28, channels=1)
    image, label = ds[5]
    assert len(ds) == 64 and image.shape == (1, 28, 28) and image.dtype == torch.float32
    assert label == 5 and {ds[i][1] for i in range(len(ds))} == set(range(10))
    raw = (tmp_path / "train-images-idx3-ubyte").read_bytes()[16:]
    pixel = raw[5 * 784 + 3 * 28 + 7]
    assert image[0, 3, 7].item() == pytest.approx((pixel / 255 - 0.1307) / 0.3081, abs=1e-5)
    test = build_dataset({"name": "mnist", "root": str(tmp_path)}, train=False, image_size=28, channels=1)
    assert len(test) == 32


def test_mnist_gz_resized_to_rgb(tmp_path):
    write_mnist(tmp_path / "plain")
    write_mnist(tmp_path / "gz", gz=True)
    plain = build_dataset({"name": "mnist", "root": str(tmp_path / "plain")}, train=True, image_size=28, channels=1)
    gz = build_dataset({"name": "mnist", "root": str(tmp_path / "gz")}, train=True, image_size=32, channels=3)
    assert torch.equal(plain.images, gz.images)
    image, _ = gz[0]
    assert image.shape == (3, 32, 32) and torch.equal(image[0], image[2])


def test_cifar10_dataset_resized_normalised(tmp_path):
    folder = write_cifar10(tmp_path, n_per_batch=20)
    spec = {"name": "cifar10", "root": str(tmp_path)}
    native = build_dataset(spec, train=True, image_size=32, channels=3)
    assert len(native) == 100 and native.classes[0] == "airplane"
    with open(folder / "data_batch_2", "rb") as f:
        batch = pickle.load(f, encoding="bytes")
    row, label = batch[b"data"][3], batch[b"labels"][3]
    image, got = native[20 + 3]
    assert got == label
    # channel 1 (green) at pixel (2, 5): byte 1024 + 2 * 32 + 5 of the row
    assert image[1, 2, 5].item() == pytest.approx((row[1024 + 69] / 255 - 0.4822) / 0.2435, abs=1e-5)
    vit = build_dataset(spec, train=False, image_size=224, channels=3)
    image, label = vit[0]
    assert len(vit) == 20 and image.shape == (3, 224, 224) and image.dtype == torch.float32
    assert all(0 <= vit[i][1] < 10 for i in range(len(vit)))


def test_cifar_fraction_deterministic_nested_proportional(tmp_path):
    write_cifar10(tmp_path, n_per_batch=20)
    spec = {"name": "cifar10", "root": str(tmp_path)}
    tenth = build_dataset({**spec, "fraction": 0.1}, train=True, image_size=32, channels=3, seed=3)
    again = build_dataset({**spec, "fraction": 0.1}, train=True, image_size=32, channels=3, seed=3)
    fifth = build_dataset({**spec, "fraction": 0.2}, train=True, image_size=32, channels=3, seed=3)
    assert len(tenth) == 10 and len(fifth) == 20
    assert torch.equal(tenth.images, again.images)
    rows = {bytes(x.numpy()) for x in fifth.images}
    assert all(bytes(x.numpy()) in rows for x in tenth.images)
    assert share_indices(100, 0.1, 3) != share_indices(100, 0.1, 4)
    full_test = build_dataset({**spec, "fraction": 0.1}, train=False, image_size=32, channels=3)
    assert len(full_test) == 20  # the share applies to the training set only


def test_cifar100_dataset(tmp_path):
    write_cifar100(tmp_path, n=40)
    ds = build_dataset({"name": "cifar100", "root": str(tmp_path), "fraction": 0.5}, train=True,
                       image_size=48, channels=3)
    assert len(ds) == 20 and ds[0][0].shape == (3, 48, 48) and len(ds.classes) == 100
    assert all(0 <= ds[i][1] < 100 for i in range(len(ds)))


def test_synthetic_dataset_deterministic():
    spec = {"name": "synthetic", "num_classes": 7, "length": 50}
    a = build_dataset(spec, train=True, image_size=16, channels=3, seed=1)
    b = build_dataset(spec, train=True, image_size=16, channels=3, seed=1)
    assert len(a) == 50 and a[4][0].shape == (3, 16, 16) and a[4][0].dtype == torch.float32
    assert torch.equal(a[4][0], b[4][0]) and a[4][1] == b[4][1]
    assert not torch.equal(a[4][0], a[5][0])
    assert all(0 <= a[i][1] < 7 for i in range(50))
    val = build_dataset(spec, train=False, image_size=16, channels=3, seed=1)
    assert not torch.equal(a[4][0], val[4][0])
    assert len(build_dataset({**spec, "fraction": 0.1}, train=True, image_size=16, channels=3)) == 5


def test_imagefolder_dataset(tmp_path):
    write_imagefolder(tmp_path, per_class=4, size=(40, 30))
    spec = {"name": "imagefolder", "root": str(tmp_path)}
    train = build_dataset(spec, train=True, image_size=24, channels=3)
    val = build_dataset(spec, train=False, image_size=24, channels=1)
    assert len(train) == 12 and train.classes == ["cat", "dog", "fish"]
    assert train[0][0].shape == (3, 24, 24) and val[11][0].shape == (1, 24, 24) and val[11][1] == 2
    assert len(build_dataset({**spec, "fraction": 0.5}, train=True, image_size=24, channels=3)) == 6


def test_ade20k_is_not_a_torch_dataset_here(tmp_path):
    with pytest.raises(ValueError, match="MMSegmentation"):
        build_dataset({"name": "ade20k", "root": str(tmp_path)}, train=True, image_size=32, channels=3)


class Indices(torch.utils.data.Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, index):
        return index


def test_loader_world_size_two_splits_disjointly():
    seen = []
    for rank in range(2):
        loader = build_loader(Indices(40), batch_size=4, rank=rank, world_size=2, seed=0, num_workers=0)
        assert isinstance(loader.sampler, torch.utils.data.DistributedSampler)
        assert not loader.persistent_workers
        seen.append([int(i) for batch in loader for i in batch])
    assert len(seen[0]) == len(seen[1]) == 20
    assert set(seen[0]).isdisjoint(seen[1]) and set(seen[0]) | set(seen[1]) == set(range(40))


def test_loader_epochs_and_workers():
    loader = build_loader(Indices(32), batch_size=8, rank=0, world_size=1, seed=0, num_workers=0)
    first = list(loader.sampler)
    loader.sampler.set_epoch(1)
    assert sorted(first) == sorted(loader.sampler) and first != list(loader.sampler)
    workers = build_loader(Indices(32), batch_size=8, rank=0, world_size=1, seed=0, num_workers=2)
    assert workers.persistent_workers and workers.num_workers == 2
    with pytest.raises(ValueError, match="no full batch of 8 on each of 4 ranks"):
        build_loader(Indices(20), batch_size=8, rank=0, world_size=4, seed=0, num_workers=0)
