"""trainer.params.weights=<torchvision weights name>|PATH|null for trainer=frozen_backbone:
the static table of names against torchvision, a loaded backbone that stays frozen while
its head trains, and the launch that fetches a named file once or refuses in one line
(campaign/launch/weights.py). No test reaches the network: the launches here go through
a proxy that answers nothing, as a cluster's offline node would."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainers.specs._torchvision_weights import WEIGHTS, is_path, names_of, resolve
from trainers.specs.frozen_backbone import Backbone

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")

# The smallest backbone (1.2M parameters) at 32x32, a tiny head: start-up, not compute
TINY = ["trainer=frozen_backbone", "trainer.params.backbone=squeezenet1_0", "trainer.params.classifier=mlp", "trainer.params.hidden=16",
        "trainer.params.image_size=32", "dataset.length=32"]
SQUEEZENET = "squeezenet1_0-b66bff10.pth"
URL = f"https://download.pytorch.org/models/{SQUEEZENET}"
# a proxy nobody listens on: urllib's download fails at once, whatever network this machine has
OFFLINE = {"https_proxy": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9", "no_proxy": "", "NO_PROXY": ""}


# ---------------------------------------------------------------------------- the table


@pytest.mark.parametrize("backbone", [b.value for b in Backbone])
def test_the_table_is_torchvisions(backbone):
    """Every backbone the trainer builds: its enum, every member's URL and its default, as the
    installed torchvision has them; every name the table takes resolves as get_weight does."""
    from torchvision.models import get_model_weights, get_weight

    kind = get_model_weights(backbone)
    enum_name, members, default = WEIGHTS[backbone]
    assert enum_name == kind.__name__
    assert {m: f"https://download.pytorch.org/models/{f}" for m, f in members.items()} == {w.name: w.url for w in kind}
    assert default == kind.DEFAULT.name
    for name in names_of(backbone)[1:] + [f"{enum_name}.DEFAULT"]:
        assert resolve(backbone, name).url == get_weight(name).url
    assert resolve(backbone, "DEFAULT").url == kind.DEFAULT.url
    assert resolve(backbone, default).name == f"{enum_name}.{default}"


def test_names_paths_and_refusals():
    w = resolve("resnet18", "ResNet18_Weights.IMAGENET1K_V1")
    assert (w.name, w.file, w.sha256_prefix) == ("ResNet18_Weights.IMAGENET1K_V1", "resnet18-f37072fd.pth", "f37072fd")
    assert resolve("vgg16", "VGG16_Weights.IMAGENET1K_FEATURES").sha256_prefix == "88682ab5"
    assert resolve("resnet18", None) is None and resolve("resnet18", "/data/resnet18.pth") is None
    assert all(is_path(v) for v in ("/data/w.pth", "w.pth", "weights/DEFAULT", "resnet18_weights.imagenet1k_v1"))
    assert not any(is_path(v) for v in ("DEFAULT", "IMAGENET1K_V1", "ResNet18_Weights.IMAGENET1K_V1"))
    with pytest.raises(ValueError) as err:
        resolve("resnet18", "ResNet18_Weights.IMAGENET1K_V2")
    assert str(err.value) == (
        "unknown trainer.params.weights 'ResNet18_Weights.IMAGENET1K_V2' for backbone=resnet18; name them as "
        "torchvision does: DEFAULT, ResNet18_Weights.IMAGENET1K_V1 (or a member alone, e.g. IMAGENET1K_V1), "
        "or give a state-dict file (trainer.params.weights=PATH) or null (random init)")
    with pytest.raises(ValueError, match="^trainer.params.weights 'VGG16_Weights.IMAGENET1K_V1' names vgg16's "
                                         "weights, not resnet18's; name them as torchvision does: DEFAULT, "):
        resolve("resnet18", "VGG16_Weights.IMAGENET1K_V1")


# ---------------------------------------------------------------------------- the job


def perturbed_squeezenet(path: Path) -> dict:
    """A squeezenet1_0 state dict unlike any default init (seeded, then shifted), saved at ``path``."""
    torch.manual_seed(123)
    state = {k: v + 0.01 * torch.randn_like(v) for k, v in torchvision.models.squeezenet1_0().state_dict().items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(state, path)
    return state


def test_a_weights_file_loads_into_a_backbone_that_stays_frozen_while_the_head_trains(tmp_path):
    from trainers import loop
    from trainers.dist import DistContext
    from trainers.frozen_backbone import FrozenBackboneTrainer
    from trainers.instrument import Recorder

    state = perturbed_squeezenet(tmp_path / "mine.pth")
    ctx = DistContext(rank=0, world_size=1, local_rank=0, local_world_size=1, num_nodes=1,
                      device=torch.device("cpu"), backend="none", emulated=False, host="test")
    params = {"backbone": "squeezenet1_0", "hidden": 16, "image_size": 32, "engine": "ddp", "classifier": "mlp",
              "dropout": 0.0, "mode": "train", "weights": str(tmp_path / "mine.pth")}
    cfg = {"gpus": 1, "experiment": {}, "dataset": {"name": "synthetic", "num_classes": 10, "length": 16},
           "trainer": {"name": "frozen_backbone", "optimizer": "sgd", "lr": 0.1, "momentum": 0.9,
                       "precision": "fp32", "params": params}}
    trainer = FrozenBackboneTrainer(ctx, cfg, {"batch_per_gpu": 4, "iterations": 4, "warmup": 1, "seed": 0,
                                               "grad_accum": 1})
    head = {k: v.clone() for k, v in trainer.model.head.state_dict().items()}
    loop.train(trainer, Recorder(torch.device("cpu"), warmup=1, expected_iterations=5), 5)

    backbone = trainer.model.backbone.state_dict()
    assert backbone and set(backbone) <= set(state)  # the ImageNet head (classifier.1) is dropped
    assert all(torch.equal(v, state[k]) for k, v in backbone.items())  # the file's tensors, after training
    fresh = torchvision.models.squeezenet1_0().state_dict()
    assert not torch.equal(backbone["features.0.weight"], fresh["features.0.weight"])
    after = trainer.model.head.state_dict()
    assert all(not torch.equal(head[k], after[k]) for k in head)  # every head tensor trained
    assert trainer.summary_extra()["weights_file"] == str(tmp_path / "mine.pth")


def test_densenet121_loads_torchvisions_old_key_names(tmp_path):
    """torchvision's densenet121-a639ec97.pth (2017: no num_batches_tracked) names
    ``...denselayer1.norm.1.weight`` what the model calls ``norm1``; torchvision renames them
    on load, and so does the trainer; still strict: another model's keys are refused."""
    import re

    from trainers.models.classifier import build_classifier

    torch.manual_seed(7)
    reference = torchvision.models.densenet121().state_dict()
    old = {re.sub(r"(denselayer\d+\.(?:norm|relu|conv))([12])\.", r"\1.\2.", k): v
           for k, v in reference.items() if not k.endswith("num_batches_tracked")}
    assert any(".norm.1." in k for k in old) and not any(".norm1." in k for k in old)
    torch.save(old, tmp_path / "densenet121-old.pth")
    model = build_classifier("densenet121", classifier="linear", weights=str(tmp_path / "densenet121-old.pth"))
    key = "features.denseblock1.denselayer1.norm1.running_var"
    assert torch.equal(model.backbone.state_dict()[key], reference[key])
    with pytest.raises(ValueError, match="not squeezenet1_0 weights"):
        build_classifier("squeezenet1_0", weights=str(tmp_path / "densenet121-old.pth"))


def test_a_torchvision_name_without_a_file_is_not_loaded():
    from trainers.frozen_backbone import weights_file

    assert weights_file({"weights": "DEFAULT", "weights_file": "/r/weights/x.pth"}) == "/r/weights/x.pth"
    assert weights_file({"weights": "/w/x.pth"}) == "/w/x.pth" and weights_file({"weights": None}) is None
    with pytest.raises(RuntimeError, match="names torchvision weights but no weights_file"):
        weights_file({"weights": "DEFAULT"})


def test_download_checks_the_hash_its_name_carries_and_renames_into_place(tmp_path, monkeypatch):
    """A local HTTP server stands in for download.pytorch.org: the right bytes land whole
    under their name; bytes whose sha256 is not the name's prefix are refused, nothing left."""
    import hashlib
    import http.server
    import threading

    from campaign.common.errors import ConfigError
    from campaign.launch.weights import download

    for var in OFFLINE:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.delenv("http_proxy", raising=False)
    monkeypatch.delenv("HTTP_PROXY", raising=False)
    served = tmp_path / "served"
    served.mkdir()
    body = b"weights" * 1000
    good = f"w-{hashlib.sha256(body).hexdigest()[:8]}.pth"
    (served / good).write_bytes(body)
    (served / "w-00000000.pth").write_bytes(body)
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args):
            super().__init__(*args, directory=str(served))

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        root = f"http://127.0.0.1:{server.server_address[1]}/"
        cache = tmp_path / "res" / "weights"
        assert download(root + good, cache / good, asked="X", sha256_prefix=good[2:10]).read_bytes() == body
        with pytest.raises(ConfigError) as err:
            download(root + "w-00000000.pth", cache / "w-00000000.pth", asked="X", sha256_prefix="00000000")
        assert str(err.value) == (f"trainer.params.weights=X: could not download {root}w-00000000.pth (its sha256 "
                                  f"{hashlib.sha256(body).hexdigest()[:8]} is not the 00000000 its name says); "
                                  f"place w-00000000.pth in {cache}/ (or give trainer.params.weights=PATH)")
        with pytest.raises(ConfigError, match=r"could not download .*/absent-1234abcd.pth \(HTTP 404 "):
            download(root + "absent-1234abcd.pth", cache / "absent-1234abcd.pth", asked="X")
        assert sorted(p.name for p in cache.iterdir()) == [good]  # no half file, no bad file
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


# ---------------------------------------------------------------------------- the launch


def offline(ws):
    ws.env.update(OFFLINE)
    return ws


def test_a_named_weight_that_cannot_be_fetched_is_refused_in_one_line(ws):
    res = offline(ws).launch("-m", "platform=local", "experiment=smoke", *TINY,
                             "trainer.params.weights=SqueezeNet1_0_Weights.IMAGENET1K_V1")
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    cache = ws.results.resolve() / "weights"
    assert lines[0].startswith(f"error: trainer.params.weights=SqueezeNet1_0_Weights.IMAGENET1K_V1: could not "
                               f"download {URL} (")
    assert lines[0].endswith(f"); place {SQUEEZENET} in {cache}/ (or give trainer.params.weights=PATH)")
    assert not ws.db.exists() and not (ws.results / "jobs").exists()
    assert not list(cache.iterdir())  # no half file left behind


def test_a_dry_run_fetches_nothing_and_notes_the_missing_files(ws):
    res = offline(ws).launch("-m", "platform=local", "experiment=smoke", *TINY,
                             "trainer.params.backbone=squeezenet1_0,resnet18", "trainer.params.weights=DEFAULT",
                             "dry_run=true")
    assert res.returncode == 0, res.stderr
    assert "2 point(s)" in res.stdout
    assert {ln.split()[-5] for ln in res.stdout.splitlines() if ln.split()[:1] in (["0"], ["1"])} == \
        {"squeezenet1_0", "resnet18"}
    cache = ws.results.resolve() / "weights"
    notes = [ln for ln in res.stdout.splitlines() if ln.startswith("note: trainer.params.weights")]
    assert notes == [
        f"note: trainer.params.weights=DEFAULT: {f} is not in {cache}/ yet; the launch downloads it from "
        f"https://download.pytorch.org/models/{f} (once, for every job), or place it there by hand"
        for f in (SQUEEZENET, "resnet18-f37072fd.pth")]
    assert not ws.db.exists() and not cache.exists()


def test_a_missing_weights_path_is_refused_and_an_unknown_name_lists_the_names(ws):
    res = ws.launch("-m", "platform=local", "experiment=smoke", *TINY, f"trainer.params.weights={ws.path}/none.pth")
    assert res.returncode == 2
    assert res.stderr.strip() == (f"error: trainer.params.weights={ws.path}/none.pth: no such file {ws.path}/none.pth;"
                                  " give a state-dict file that exists, a torchvision weights name (DEFAULT, or e.g. "
                                  "ResNet18_Weights.IMAGENET1K_V1), or null")
    res = ws.launch("-m", "platform=local", "experiment=smoke", *TINY, "trainer.params.weights=IMAGENET1K_V2")
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1
    assert res.stderr.strip().endswith(
        "unknown trainer.params.weights 'IMAGENET1K_V2' for backbone=squeezenet1_0; name them as torchvision does: "
        "DEFAULT, SqueezeNet1_0_Weights.IMAGENET1K_V1 (or a member alone, e.g. IMAGENET1K_V1), or give a state-dict "
        "file (trainer.params.weights=PATH) or null (random init)")
    assert not ws.db.exists()


@pytest.mark.slow
def test_a_weights_path_is_what_the_job_loads_with_the_digest_the_launch_saw(ws):
    """A state-dict file of one's own (trainer.params.weights=PATH): nothing is fetched (the
    proxy would refuse it), the stored config says the file and the sha256 the launch
    computed, the job loaded it. (A file placed by hand in the cache under torchvision's
    name must have the sha256 its name carries: tests/test_trust_door.py.)"""
    import hashlib

    placed = ws.path / "mine" / "squeezenet.pth"
    perturbed_squeezenet(placed)
    res = offline(ws).launch("-m", "platform=local", "experiment=smoke", *TINY, f"trainer.params.weights={placed}")
    assert res.returncode == 0, res.stderr
    assert ws.campaign("status", "--wait", "--interval", "0.5").returncode == 0
    (config,) = ws.query("SELECT config FROM point")
    params = json.loads(config[0])["trainer"]["params"]
    assert (params["weights"], params["weights_file"]) == (str(placed), str(placed))
    assert params["weights_sha256"] == hashlib.sha256(placed.read_bytes()).hexdigest()
    extras = [json.loads(e) for (e,) in ws.query("SELECT extra FROM rank_timing")]
    assert extras and all(e["weights_file"] == str(placed) for e in extras)
