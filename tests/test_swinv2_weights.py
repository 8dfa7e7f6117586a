"""The reference study's hardware and weights (issue #47): ``study=swinv2_thesis`` runs its
V100 points in the CUDA 12.6 image (an image per platform), so its dry run lists all 14
points anywhere; a launch is refused only for a missing image, named with its build
command. It fine-tunes SwinV2-B's ImageNet-22K checkpoint (trainers/specs/_swinv2_weights.py),
named with its URL and the sha256 prefix its file name carries, staged by the launch through
campaign/launch/weights.py like torchvision's; OpenMMLab's key names are converted to timm's
(trainers/mmseg/swinv2_keys.py); a missing ``pretrained=PATH`` is refused at launch.
"""

from __future__ import annotations

import hashlib
from types import SimpleNamespace

import pytest

from campaign.common.errors import ConfigError
from conftest import Workspace
from trainers.specs import _swinv2_weights
from trainers.specs._swinv2_weights import REFERENCE, check, resolve, window_sizes

torch = pytest.importorskip("torch")
timm_v2 = pytest.importorskip("timm.models.swin_transformer_v2")
try:  # mmseg's import sets process-wide variables (cv2's): at collection, as tests/test_mmseg.py does
    from trainers.mmseg import backbone as bb
except ImportError:
    bb = None

URL = ("https://download.openmmlab.com/mmclassification/v0/swin-v2/pretrain/"
       "swinv2-base-w12_3rdparty_in21k-192px_20220803-f7dc9763.pth")


def test_the_reference_checkpoint_is_named_with_its_url_and_the_prefix_its_name_carries():
    named = resolve(REFERENCE)
    assert (named.url, named.file, named.sha256_prefix) == (URL, URL.rsplit("/", 1)[1], "f7dc9763")
    assert window_sizes(REFERENCE) == (12, 12, 12, 6) and window_sizes("/data/mine.pth") == (0, 0, 0, 0)
    assert resolve("/data/mine.pth") is None and resolve(None) is None
    check("base", REFERENCE)
    with pytest.raises(ValueError, match=r"^trainer.params.pretrained=swinv2-base-w12_3rdparty_in21k-192px is "
                                         r"SwinV2-base's checkpoint; variant=micro cannot load it"):
        check("micro", REFERENCE)


def _micro(norm: bool = False):
    """A micro SwinV2 as SwinV2Timm holds it (its final norm replaced: the stages' own norms serve)."""
    swin = timm_v2.SwinTransformerV2(img_size=64, patch_size=4, embed_dim=32, depths=(1, 1, 1, 1),
                                     num_heads=(1, 2, 4, 8), window_size=8, num_classes=0)
    if not norm:
        swin.norm = torch.nn.Identity()
    return swin


def test_unfolds_columns_are_put_back_in_timms_patch_order():
    """mmpretrain's PatchMerging (nn.Unfold, then the reduction, then the post-norm) and timm's
    give the same output once the reduction's columns are reordered."""
    from trainers.mmseg.swinv2_keys import unfold_columns_to_timm

    torch.manual_seed(0)
    c, h, w = 3, 4, 6
    x = torch.randn(2, h, w, c)
    w_mm = torch.randn(2 * c, 4 * c)
    unfolded = torch.nn.Unfold(kernel_size=2, stride=2)(x.permute(0, 3, 1, 2)).transpose(1, 2)  # B, L, 4C
    theirs = (unfolded @ w_mm.T).reshape(2, h // 2, w // 2, 2 * c)
    merge = timm_v2.PatchMerging(dim=c, out_dim=2 * c)
    merge.norm = torch.nn.Identity()
    with torch.no_grad():
        merge.reduction.weight.copy_(unfold_columns_to_timm(w_mm))
        assert torch.allclose(merge(x), theirs, atol=1e-6)


def _mmpretrain_names(state: dict) -> dict:
    """timm's SwinV2 state dict under mmpretrain's names, laid out as its modules hold it."""
    import re

    out = {}
    for k, v in state.items():
        if k.startswith("norm."):
            k = k.replace("norm.", "norm3.")
        k = k.replace("patch_embed.proj.", "patch_embed.projection.").replace(".mlp.fc1.", ".ffn.layers.0.0.")
        k = k.replace(".mlp.fc2.", ".ffn.layers.1.").replace(".attn.", ".attn.w_msa.")
        k = re.sub(r"^layers\.", "stages.", k)
        if k.endswith("downsample.reduction.weight"):  # timm's column j*C+c to Unfold's c*4+offset
            o, four_c = v.shape
            v = v.reshape(o, 4, four_c // 4)[:, [0, 2, 1, 3], :].transpose(1, 2).reshape(o, four_c)
        out["backbone." + k] = v.clone()
    out["backbone.stages.0.blocks.0.attn.w_msa.relative_position_index"] = torch.zeros(64, 64, dtype=torch.long)
    out["backbone.stages.0.blocks.0.attn.w_msa.relative_coords_table"] = torch.zeros(1, 15, 15, 2)
    out["head.fc.weight"], out["head.fc.bias"] = torch.zeros(21841, 256), torch.zeros(21841)
    return out


@pytest.mark.skipif(bb is None, reason="needs mmseg")
def test_an_openmmlab_checkpoint_loads_into_the_backbone_checked_against_its_digest(tmp_path):
    PretrainedError, load_pretrained = bb.PretrainedError, bb.load_pretrained
    torch.manual_seed(1)
    source = _micro(norm=True)  # the checkpoint's final norm (norm3) is dropped on load
    path = tmp_path / "swinv2-micro-1234abcd.pth"
    torch.save({"meta": {"note": "converted"}, "state_dict": _mmpretrain_names(source.state_dict())}, path)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    target = _micro()
    load_pretrained(target, str(path), digest)
    got, want = target.state_dict(), source.state_dict()
    assert all(torch.equal(got[k], want[k]) for k in want if not k.startswith("norm."))
    with pytest.raises(PretrainedError, match="sha256"):
        load_pretrained(_micro(), str(path), "0" * 64)


def test_the_launch_records_the_named_checkpoints_digest_and_refuses_another(tmp_path, monkeypatch):
    """The cached file is checked against the prefix its name carries and its full digest
    recorded for the job (trainers/state_file.py checks it on the bytes it loads)."""
    from campaign.launch.weights import cache_folder, fetch_weights

    body = b"a SwinV2 checkpoint"
    prefix = hashlib.sha256(body).hexdigest()[:8]
    monkeypatch.setitem(_swinv2_weights.WEIGHTS, "test-ckpt", (f"https://example.invalid/ckpt-{prefix}.pth", "micro",
                                                               (0, 0, 0, 0)))
    cache = cache_folder(str(tmp_path))
    cache.mkdir(mode=0o700)
    (cache / f"ckpt-{prefix}.pth").write_bytes(body)
    params = {"pretrained": "test-ckpt", "weights_file": str(cache / f"ckpt-{prefix}.pth"), "weights_sha256": None}
    point = SimpleNamespace(config={"trainer": {"name": "swinv2_upernet", "params": params}})
    assert fetch_weights([point]) == ([], [])
    assert params["weights_sha256"] == hashlib.sha256(body).hexdigest()
    (cache / f"ckpt-{prefix}.pth").write_bytes(b"another file")
    with pytest.raises(ConfigError, match=r"^trainer.params.pretrained=test-ckpt: "):
        fetch_weights([point])


def _gpus(point: dict) -> int:
    return point["resources"]["nodes"] * point["resources"]["gpus_per_node"]


def test_the_reference_dry_run_lists_its_14_points_v100_among_them_with_what_is_missing_as_notes(tmp_path):
    ws = Workspace(tmp_path).away_from_slurm()
    res = ws.launch("-m", "study=swinv2_thesis", "dataset.root=/data/ade20k", "--dry-run")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "dry run: 14 point(s)" in res.stdout
    assert "  v100            3 point(s)" in res.stdout  # per platform
    images = ws.results.resolve() / "images"
    assert (f"note: would be refused here: container image {images}/campaign-cu126.sif not found; build it with "
            f"singularity/build.sh --v100 -o {images}/campaign-cu126.sif, or give v100 its own "
            "(+container.images.v100=PATH)") in res.stdout
    assert (f"note: would be refused here: container image {images}/campaign-cu130.sif not found; build it with "
            f"singularity/build.sh -o {images}/campaign-cu130.sif, or set container.image=PATH") in res.stdout
    cache = ws.results.resolve() / "weights"
    assert (f"note: trainer.params.pretrained={REFERENCE}: {URL.rsplit('/', 1)[1]} is not in {cache}/ yet; the "
            f"launch downloads it from {URL} (once, for every job), or place it there by hand") in res.stdout
    assert not ws.results.exists()


def test_a_launch_is_refused_for_a_missing_image_named_with_its_build_command(tmp_path):
    from campaign_datasets.standin import write_standin

    ws = Workspace(tmp_path).away_from_slurm()
    write_standin("ade20k", ws.path / "ade", "tests")
    res = ws.launch("-m", "study=swinv2_thesis", f"dataset.root={ws.path / 'ade'}", "platform=v100", "gpus=1")
    assert res.returncode == 2
    images = ws.results.resolve() / "images"
    assert res.stderr.strip().splitlines() == [
        f"error: container image {images}/campaign-cu126.sif not found; build it with singularity/build.sh --v100 "
        f"-o {images}/campaign-cu126.sif, or give v100 its own (+container.images.v100=PATH)"]
    assert not ws.db.exists()


def test_a_missing_pretrained_path_is_refused_at_launch(tmp_path):
    ws = Workspace(tmp_path)
    res = ws.launch("-m", "platform=local", "experiment=smoke", "trainer=swinv2_upernet", "trainer.params.variant=micro",
                    "dataset.image_size=64", f"trainer.params.pretrained={ws.path}/none.pth")
    assert res.returncode == 2
    assert res.stderr.strip() == (
        f"error: trainer.params.pretrained={ws.path}/none.pth: no such file {ws.path}/none.pth; give a checkpoint "
        f"file that exists, a named one ({REFERENCE}), or null (random init)")
    assert not ws.db.exists()
