"""The one door (issue 48): each reproduction replayed on real files, refused in one line
or made harmless. Tests run as root: "another user" is nobody (uid 65534)."""

from __future__ import annotations

import os
import pickle
import stat
import struct
from pathlib import Path

import numpy as np
import pytest

from campaign_datasets.standin import write_cifar10, write_cifar100
from campaign_door import Refused, load_cifar, open_folder, read_checked, sha256_file

NOBODY = 65534
TINY = ["trainer=frozen_backbone", "trainer.params.backbone=resnet18", "trainer.params.classifier=mlp",
        "trainer.params.hidden=16", "trainer.params.image_size=32", "dataset.length=32"]
OFFLINE = {"https_proxy": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9", "no_proxy": "", "NO_PROXY": ""}


class Payload:
    """What an attacker pickles: unpickling it runs ``os.system``."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "victim.bashrc"
    victim.write_text("export PS1=mine\n")
    victim.chmod(0o600)
    return victim


def _one_line(res) -> str:
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1, res.stderr
    return lines[0]


# ---------------------------------------------------------------- a planted CIFAR batch runs nothing

def test_a_planted_cifar_batch_is_refused_in_one_line_and_runs_nothing(tmp_path):
    from trainers.data.cifar import CIFAR

    folder = write_cifar10(tmp_path, n_per_batch=4)
    marker = tmp_path / "marker"
    batch = folder / "data_batch_1"
    batch.write_bytes(pickle.dumps({b"data": Payload(marker), b"labels": [1]}, protocol=2))
    with pytest.raises(Refused) as err:
        CIFAR(str(tmp_path), variant="cifar10")
    assert str(err.value).startswith(f"{batch} is not a CIFAR batch (it names posix.system): ")
    assert "\n" not in str(err.value) and not marker.exists()


@pytest.mark.parametrize("name", ["builtins eval", "subprocess Popen", "numpy load", "numpy.lib.npyio load"])
def test_no_other_global_is_looked_up(tmp_path, name):
    module, attr = name.split()
    data = b"\x80\x02c" + f"{module}\n{attr}\n".encode() + b"X\x01\x00\x00\x00x\x85R."  # GLOBAL, ('x',), REDUCE
    (tmp_path / "b").write_bytes(data)
    with pytest.raises(Refused, match=f"it names {module}.{attr}"):
        load_cifar(tmp_path / "b")


def test_an_object_array_a_link_and_an_oversize_batch_are_refused(tmp_path):
    (tmp_path / "obj").write_bytes(pickle.dumps({b"data": np.array([1, "x"], dtype=object)}, protocol=2))
    with pytest.raises(Refused, match="an array of Python objects"):
        load_cifar(tmp_path / "obj")
    (tmp_path / "link").symlink_to(tmp_path / "obj")
    with pytest.raises(Refused, match="is not a regular file \\(a symbolic link\\); not read"):
        load_cifar(tmp_path / "link")
    with pytest.raises(Refused, match="is larger than 10 bytes"):
        load_cifar(tmp_path / "obj", max_bytes=10)


class _Py2(pickle._Pickler):
    """Writes bytes as Python 2's cPickle wrote str (BINSTRING): the real batches' form."""

    dispatch = pickle._Pickler.dispatch.copy()

    def save_bytes(self, obj):
        n = len(obj)
        self.write((pickle.SHORT_BINSTRING + bytes([n]) if n < 256 else pickle.BINSTRING + struct.pack("<i", n)) + obj)
        self.memoize(obj)

    dispatch[bytes] = save_bytes


def test_the_real_formats_load_python2_pickles_and_the_standins(tmp_path):
    import io

    from trainers.data.cifar import load_batch

    data = np.arange(2 * 3072, dtype=np.uint8).reshape(2, 3072)
    out = io.BytesIO()
    _Py2(out, protocol=2).dump({b"data": data, b"labels": [3, 4], b"batch_label": b"training batch 1 of 5"})
    raw = out.getvalue().replace(b"numpy._core.multiarray\n", b"numpy.core.multiarray\n")  # numpy 1's name, as in 2009
    assert b"numpy.core.multiarray\n_reconstruct" in raw and b"_codecs" not in raw
    (tmp_path / "py2").write_bytes(raw)
    got = load_batch(str(tmp_path / "py2"))
    assert np.array_equal(got["data"], data) and got["labels"] == [3, 4]
    for protocol in (2, 4):
        folder = write_cifar100(tmp_path / f"p{protocol}", n=6, protocol=protocol)
        assert load_batch(str(folder / "train"))["data"].shape == (6, 3072)
        assert len(load_batch(str(folder / "meta"))["fine_label_names"]) == 100


# ---------------------------------------------------------------- planted links: targets unchanged

def test_datagen_never_writes_through_a_planted_link(ws, tmp_path):
    victim = _victim(tmp_path)
    out = ws.path / "data"
    (out / "cifar-100-python").mkdir(parents=True)
    (out / "cifar-100-python" / "test").symlink_to(victim)
    line = _one_line(ws.campaign("datagen", "cifar100", "--out", str(out), "--size", "tests"))
    assert line == f"error: {out}/cifar-100-python/test is a symbolic link, not a regular file; remove it " \
                   "(nothing was written)"
    other = ws.path / "data2"
    (other / "cifar-100-python").mkdir(parents=True)
    (other / "cifar-100-python" / "STANDIN.txt").symlink_to(victim)
    line = _one_line(ws.campaign("datagen", "cifar100", "--out", str(other), "--size", "tests"))
    assert line.endswith("STANDIN.txt is a symbolic link, not a regular file; remove it (nothing was written)")
    assert victim.read_text() == "export PS1=mine\n" and stat.S_IMODE(victim.stat().st_mode) == 0o600


def test_a_launch_writes_no_standin_into_another_users_folder(ws, tmp_path):
    """The issue's replay: another user made datasets/cifar100-standin/cifar-100-python with a
    link at test; the launch (its preflight first) refuses in one line, the target unchanged."""
    victim = _victim(tmp_path)
    planted = ws.results / "datasets" / "cifar100-standin" / "cifar-100-python"
    planted.mkdir(parents=True)
    (planted / "test").symlink_to(victim)
    for folder in (planted.parent, planted):
        os.chown(folder, NOBODY, NOBODY)
    res = ws.launch("-m", "study=vit_deepspeed_small", "platform=local")
    # the study's cifar10 stand-in is written (its own folder, fresh): "writing ..." and "wrote ..." lines
    errors = [ln for ln in res.stderr.splitlines() if not ln.startswith(("writing ", "wrote "))]
    assert res.returncode == 2 and len(errors) == 1, res.stderr
    assert errors[0].startswith(f"error: dataset.root={planted.parent}: the stand-in could not be written (folder "
                                f"{planted} belongs to another user (uid {NOBODY})"), errors[0]
    assert victim.read_text() == "export PS1=mine\n" and not ws.db.exists()
    assert sorted(p.name for p in planted.iterdir()) == ["test"]


def test_a_standin_others_could_have_written_is_not_reused(tmp_path):
    from campaign.launch.study import reused
    from campaign_datasets.standin import write_standin

    root = tmp_path / "cifar10-standin"
    folder = write_standin("cifar10", root, "tests")
    assert reused("cifar10", str(root)) is None
    os.chown(folder / "data_batch_1", NOBODY, NOBODY)
    assert reused("cifar10", str(root)) == (
        f"dataset.root={root}: the stand-in there is not reused (the stand-in's file {folder}/data_batch_1 belongs "
        f"to another user (uid {NOBODY})): someone else could have written it; remove it (rm -r {root}) to have "
        "the launch write a new one, or choose another dataset.root")
    os.chown(folder / "data_batch_1", 0, 0)
    folder.chmod(0o777)
    assert "is writable by others (drwxrwxrwx) without the sticky bit" in reused("cifar10", str(root))


def test_a_part_file_swapped_for_a_link_gets_no_victim_chmoded(tmp_path):
    victim = _victim(tmp_path)
    cache = tmp_path / "weights"

    def swap(fh):
        fh.write(b"weights")
        (part,) = [p for p in cache.iterdir() if p.name.endswith(".part")]
        part.unlink()
        part.symlink_to(victim)  # the racing writer's move

    with open_folder(cache) as folder:
        folder.write("w-00000000.pth", swap, mode=0o644)
    assert stat.S_IMODE(victim.stat().st_mode) == 0o600 and victim.read_text() == "export PS1=mine\n"
    with pytest.raises(Refused, match="is not a regular file \\(a symbolic link\\)"):  # what the rename put there
        read_checked(cache / "w-00000000.pth", "00000000")


# ---------------------------------------------------------------- the weights cache, checked on every use

def _nan_resnet18(path: Path) -> None:
    torch = pytest.importorskip("torch")
    torchvision = pytest.importorskip("torchvision")
    state = {k: torch.full_like(v, float("nan")) if v.is_floating_point() else v
             for k, v in torchvision.models.resnet18().state_dict().items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(state, path)


def test_a_planted_weights_file_is_refused_by_the_launch_and_by_the_job(ws):
    planted = ws.results.resolve() / "weights" / "resnet18-f37072fd.pth"
    _nan_resnet18(planted)
    ws.env.update(OFFLINE)
    line = _one_line(ws.launch("-m", "platform=local", "experiment=smoke", *TINY, "trainer.params.weights=DEFAULT"))
    got = sha256_file(planted)
    assert line == (f"error: trainer.params.weights=DEFAULT: weights file {planted}: its sha256 {got[:8]} is not "
                    "the expected f37072fd; not used (someone may have replaced it: remove it and launch again)")
    assert not ws.db.exists()
    from trainers.models.classifier import build_classifier

    with pytest.raises(Refused, match=f"^weights file {planted}: its sha256 {got[:8]} is not the expected f37072fd"):
        build_classifier("resnet18", weights=str(planted), weights_sha256="f37072fd")
    link = planted.with_name("link.pth")
    link.symlink_to(planted)
    with pytest.raises(Refused, match=f"^weights file {link} is not a regular file \\(a symbolic link\\)"):
        build_classifier("resnet18", weights=str(link), weights_sha256=got)


def test_a_weights_path_has_its_digest_recorded_and_checked(tmp_path):
    from types import SimpleNamespace

    from campaign.common.errors import ConfigError
    from campaign.launch.weights import fetch_weights

    mine = tmp_path / "mine.pth"
    mine.write_bytes(b"not really weights")
    params = {"backbone": "resnet18", "weights": str(mine), "weights_file": str(mine), "weights_sha256": None}
    point = SimpleNamespace(config={"trainer": {"name": "frozen_backbone", "params": params}})
    assert fetch_weights([point]) == ([], [])
    assert params["weights_sha256"] == sha256_file(mine) and read_checked(mine, params["weights_sha256"])
    mine.unlink()
    mine.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ConfigError, match=f"weights file {mine} is a symbolic link; not used"):
        fetch_weights([point])
