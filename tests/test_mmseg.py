"""trainer=swinv2_upernet: SwinV2 + UPerNet with MMSegmentation 1.x, on CPU.

Model sizes, the compat fixes, the real ADE20K pipeline on generated files, a training
step single-process and on 2 gloo ranks (both loops), and the whole campaign path on
the local executor (the stock loop, then the lean one profiled). Small shapes (the micro
variant, 128x128 or 64x64 crops) keep it quick on 2 cores.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import socket
import sqlite3
import sys
from pathlib import Path

import pytest

pytest.importorskip("mmseg")
import torch  # noqa: E402

from conftest import campaign_id_from  # noqa: E402
from trainers.mmseg import compat  # noqa: E402

try:
    from tests.datagen import write_ade20k
except ImportError:  # tests/ on sys.path as a rootdir folder rather than a package
    from datagen import write_ade20k

compat.apply()
from mmseg.registry import MODELS  # noqa: E402

from trainers.dist import DistContext  # noqa: E402
from trainers.instrument import Recorder  # noqa: E402
from trainers.mmseg import backbone as bb  # noqa: E402
from trainers.mmseg import data as mdata  # noqa: E402
from trainers.mmseg import model as mmodel  # noqa: E402
from trainers.mmseg.trainer import build  # noqa: E402

CPU = torch.device("cpu")
MICRO = {"variant": "micro", "drop_path_rate": 0.0, "warmup_iters": 0}


def single_ctx() -> DistContext:
    return DistContext(rank=0, world_size=1, local_rank=0, local_world_size=1, num_nodes=1, device=CPU,
                       backend="none", emulated=False, host="test")


def job_cfg(params=None, **dataset) -> dict:
    ds = {"name": "synthetic", "root": None, "image_size": 128, "channels": 3, "num_classes": 150,
          "num_workers": 0, "fraction": None, "length": None}
    ds.update(dataset)
    return {"trainer": {"name": "swinv2_upernet", "optimizer": "adamw", "lr": 1e-3, "weight_decay": 0.01,
                        "precision": "fp32", "params": dict(MICRO, **(params or {}))},
            "dataset": ds}


def count(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def run_steps(trainer, n: int) -> list[dict]:
    rec = Recorder(CPU, warmup=0)
    for _ in range(n):
        rec.begin()
        loss = trainer.step(rec)
        rec.end(loss, trainer.images_per_step)
    rec.finish()
    return rec.rows()


# ---------------------------------------------------------------------------- model


def test_swinv2_base_parameter_count():
    cfg = {"trainer": {"params": {"variant": "base"}}, "dataset": {"image_size": 512, "num_classes": 150}}
    with torch.device("meta"):  # shapes only: no 121M-parameter initialisation
        model = MODELS.build(mmodel.model_config(cfg, CPU, 1))
    backbone, decode, aux, total = (count(model.backbone), count(model.decode_head),
                                    count(model.auxiliary_head), count(model))
    print(f"\nSwinV2-B backbone {backbone:,}  UPerHead {decode:,}  FCN aux {aux:,}  total {total:,}")
    assert backbone == pytest.approx(86.9e6, rel=0.005)
    assert total == pytest.approx(121e6, rel=0.01)
    assert model.backbone.channels == [128, 256, 512, 1024]


def test_variants_and_unknown_knobs_are_named():
    assert bb.variant_channels("tiny") == [96, 192, 384, 768]
    assert bb.variant_channels("large") == [192, 384, 768, 1536]
    with pytest.raises(ValueError, match="unknown SwinV2 variant 'huge'; available: micro, tiny, small, base, large"):
        bb.variant_channels("huge")
    with pytest.raises(ValueError, match="unknown trainer.params depth for swinv2_upernet; available: variant"):
        mmodel.params_of({"params": {"depth": 3}})
    with pytest.raises(ValueError, match="not a multiple of 32"):
        bb.SwinV2Timm("micro", img_size=100)


def test_backbone_returns_nchw_maps_and_pads_smaller_inputs():
    net = bb.SwinV2Timm("micro", img_size=128, window_size=4).eval()
    full = [tuple(m.shape) for m in net(torch.randn(2, 3, 128, 128))]
    assert full == [(2, 32, 32, 32), (2, 64, 16, 16), (2, 128, 8, 8), (2, 256, 4, 4)]
    small = [tuple(m.shape[2:]) for m in net(torch.randn(1, 3, 100, 64))]
    assert small == [(25, 16), (13, 8), (7, 4), (4, 2)]
    with pytest.raises(ValueError, match="larger than the backbone's img_size=128"):
        net(torch.randn(1, 3, 160, 128))


def test_no_weight_decay_on_norms_logit_scale_and_cpb_mlp():
    from mmengine.optim import build_optim_wrapper

    cfg = job_cfg()
    model = MODELS.build(mmodel.model_config(cfg, CPU, 1))
    wrapper = build_optim_wrapper(model, mmodel.optim_wrapper_config(cfg["trainer"], CPU))
    names = {id(p): n for n, p in model.named_parameters()}
    decay = {names[id(g["params"][0])]: g["weight_decay"] for g in wrapper.optimizer.param_groups}
    zero = [n for n, wd in decay.items() if wd == 0.0]
    assert decay["backbone.swin.layers.0.blocks.0.attn.qkv.weight"] == 0.01
    assert decay["decode_head.fpn_bottleneck.conv.weight"] == 0.01
    for needle in ("norm1.weight", "downsample.norm.weight", "out_norms.0.weight", "logit_scale",
                   "cpb_mlp.0.weight", "cpb_mlp.2.weight", "decode_head.bottleneck.bn.weight"):
        assert any(needle in n for n in zero), needle
    assert wrapper.optimizer.defaults["betas"] == (0.9, 0.999)


def test_schedule_is_linear_warmup_then_poly():
    tcfg = {"params": {"warmup_iters": 1500}}
    assert mmodel.param_scheduler_config(tcfg, 160005) == [
        dict(type="LinearLR", start_factor=1e-6, by_epoch=False, begin=0, end=1500),
        dict(type="PolyLR", eta_min=0.0, power=1.0, begin=1500, end=160005, by_epoch=False)]
    assert [s["type"] for s in mmodel.param_scheduler_config(tcfg, 9)] == ["LinearLR"]  # a short run is all warm-up


# ---------------------------------------------------------------------------- compat


def test_mmcv_ops_stand_in_keeps_mmseg_guards_and_refuses_calls():
    from mmseg.models.decode_heads import cc_head, psa_head

    if not getattr(sys.modules["mmcv.ops"], "_campaign_stub", False):
        pytest.skip("full mmcv installed: nothing is stubbed")
    assert cc_head.CrissCrossAttention is None and psa_head.PSAMask is None
    from mmcv.ops import point_sample

    with pytest.raises(RuntimeError, match="needs the full mmcv build"):
        point_sample(torch.zeros(1), torch.zeros(1))


def test_mmengine_checkpoints_load_again(tmp_path):
    import numpy as np
    from mmengine.logging import HistoryBuffer
    from mmengine.runner import CheckpointLoader

    history = HistoryBuffer()
    history.update(np.float64(1.5))
    path = tmp_path / "iter_10.pth"
    torch.save({"meta": {"seed": np.int64(3), "lr": np.float32(1e-4)}, "state_dict": {"w": torch.ones(2)},
                "message_hub": {"log_scalars": {"train/loss": history}}}, path)
    ckpt = CheckpointLoader.load_checkpoint(str(path), map_location="cpu")
    assert ckpt["message_hub"]["log_scalars"]["train/loss"].current() == 1.5


def test_gpu_only_pieces_fall_back_on_cpu():
    assert compat.norm_cfg(CPU, 2)["type"] == "BN"
    assert compat.norm_cfg(torch.device("cuda", 0), 2)["type"] == "SyncBN"
    assert compat.norm_cfg(torch.device("cuda", 0), 1)["type"] == "BN"
    assert compat.optim_wrapper_type(CPU, "bf16") == {"type": "OptimWrapper"}
    assert compat.optim_wrapper_type(torch.device("cuda", 0), "fp16")["type"] == "AmpOptimWrapper"
    with pytest.raises(ValueError, match="available: fp32, fp16, bf16"):
        compat.optim_wrapper_type(CPU, "fp8")


# ---------------------------------------------------------------------------- pretrained


def _official_names(state: dict) -> dict:
    """timm SwinV2 keys -> the official release's (downsample at the end of the previous stage)."""
    import re

    out = {re.sub(r"layers\.(\d+)\.downsample", lambda m: f"layers.{int(m.group(1)) - 1}.downsample", k): v
           for k, v in state.items()}
    out.update({"head.weight": torch.zeros(10, 256), "head.bias": torch.zeros(10),
                "norm.weight": torch.ones(256), "norm.bias": torch.zeros(256)})
    return {"model": out}


@pytest.mark.parametrize("naming", ["timm", "official"])
def test_pretrained_weights_load(tmp_path, naming):
    torch.manual_seed(1)
    source = bb.SwinV2Timm("micro", img_size=128)
    state = source.swin.state_dict()
    path = tmp_path / "swinv2_micro.pth"
    torch.save(state if naming == "timm" else _official_names(state), path)
    torch.manual_seed(2)
    target = bb.SwinV2Timm("micro", img_size=128, pretrained=str(path))
    target.init_weights()
    for name, value in source.swin.state_dict().items():
        assert torch.equal(target.swin.state_dict()[name], value), name


def test_pretrained_errors_are_one_line(tmp_path):
    missing = tmp_path / "nope.pth"
    with pytest.raises(bb.PretrainedError) as info:
        bb.SwinV2Timm("micro", img_size=128, pretrained=str(missing)).init_weights()
    assert str(info.value) == (f"pretrained={missing}: no such file; give a local SwinV2 ImageNet checkpoint "
                               f"(.pth or .safetensors) or pretrained=null")
    net = bb.SwinV2Timm("micro", img_size=128)
    state = net.swin.state_dict()
    state["layers.0.blocks.0.attn.qkv.weight"] = torch.zeros(192, 64)  # as if another variant's
    state.pop("layers.3.blocks.0.mlp.fc2.bias")
    other = tmp_path / "other.pth"
    torch.save(state, other)
    net.pretrained = str(other)
    with pytest.raises(bb.PretrainedError) as info:
        net.init_weights()
    assert str(info.value) == (
        f"pretrained={other} does not fit this SwinV2 variant: 1 missing (e.g. layers.3.blocks.0.mlp.fc2.bias); "
        f"1 of another shape (e.g. layers.0.blocks.0.attn.qkv.weight: (192, 64) vs (96, 32)) keys; "
        f"check trainer.params.variant")


# ---------------------------------------------------------------------------- data


def _labels_ok(seg: torch.Tensor, num_classes: int = 150) -> bool:
    values = set(seg.unique().tolist())
    return values <= set(range(num_classes)) | {mdata.IGNORE_INDEX}


def test_ade20k_pipeline_on_generated_files(tmp_path):
    write_ade20k(tmp_path, n_train=4, n_val=1, size=(64, 48))
    spec = job_cfg(name="ade20k", root=str(tmp_path), image_size=64)["dataset"]
    dataset = mdata.build_dataset(spec, seed=0, rank=0)
    assert len(dataset) == 4
    assert [t["type"] for t in mdata.train_pipeline(512)][2:4] == ["RandomResize", "RandomCrop"]
    assert mdata.train_pipeline(512)[2]["scale"] == (2048, 512)
    for i in range(len(dataset)):
        item = dataset[i]
        c, h, w = item["inputs"].shape
        assert c == 3 and h <= 64 and w <= 64 and item["inputs"].dtype == torch.uint8
        seg = item["data_samples"].gt_sem_seg.data
        assert tuple(seg.shape) == (1, h, w) and _labels_ok(seg)
    # ... and through the trainer (SegDataPreProcessor pads every crop to 64x64)
    trainer = build(single_ctx(), job_cfg(name="ade20k", root=str(tmp_path), image_size=64),
                    {"batch_per_gpu": 2, "iterations": 1, "warmup": 0, "seed": 0})
    rows = run_steps(trainer, 1)
    trainer.close()
    assert math.isfinite(rows[0]["loss"])


def test_synthetic_matches_ade20k_shapes_and_labels():
    spec = job_cfg()["dataset"]
    dataset = mdata.build_dataset(spec, seed=0, rank=0)
    item = dataset[3]
    assert tuple(item["inputs"].shape) == (3, 128, 128) and item["inputs"].dtype == torch.uint8
    seg = item["data_samples"].gt_sem_seg.data
    assert tuple(seg.shape) == (1, 128, 128) and seg.dtype == torch.int64
    assert _labels_ok(seg) and (seg == mdata.IGNORE_INDEX).any() and (seg < 150).any()
    assert len(dataset) == 10_000
    other = mdata.build_dataset(spec, seed=0, rank=1)[3]["inputs"]
    assert not torch.equal(other, item["inputs"])  # each rank draws its own pool


# ---------------------------------------------------------------------------- training


def test_micro_trains_on_a_fixed_batch():
    torch.set_num_threads(1)
    plan = {"batch_per_gpu": 2, "iterations": 6, "warmup": 0, "seed": 0}
    trainer = build(single_ctx(), job_cfg(length=2), plan)  # 2 samples, batch 2: the same batch every step
    assert torch.get_num_threads() == 1  # MMEngine's set-up left job.py's choice alone
    rows = run_steps(trainer, 6)
    trainer.close()
    losses = [r["loss"] for r in rows]
    print("\nmicro losses:", [round(x, 4) for x in losses])
    assert all(math.isfinite(x) for x in losses)
    assert losses[-1] < losses[0] - 0.05
    assert all(r[p] is not None and r[p] >= 0 for r in rows for p in ("data_s", "forward_s", "backward_s", "step_s"))
    assert trainer.trainable_params == count(trainer.module) and trainer.images_per_step == 2
    assert not os.path.exists(trainer.work_dir)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank: int, world: int, port: int, out: str) -> None:
    """Both loops, one after the other, in one process group: the lean one (the default) and
    MMEngine's stock iteration (MMDistributedDataParallel.train_step, through run_iter)."""
    os.environ.pop("SUBMITIT_EXECUTOR", None)
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    from trainers import dist

    ctx = dist.setup(want_device="cpu", timeout_s=120)
    try:
        saved = {}
        for loop in ("lean", "stock"):
            trainer = build(ctx, job_cfg({"loop": loop}, image_size=64),
                            {"batch_per_gpu": 2, "iterations": 2, "warmup": 0, "seed": 0})
            assert type(trainer.model).__name__ == "MMDistributedDataParallel" and trainer.loop_kind == loop
            rows = run_steps(trainer, 2)
            trainer.close()
            params = {n: p.detach().clone() for n, p in trainer.module.named_parameters()}
            saved[loop] = {"params": params, "losses": [r["loss"] for r in rows]}
        torch.save(saved, Path(out) / f"rank{rank}.pt")
    finally:
        dist.teardown(ctx)


@pytest.mark.slow
def test_two_gloo_ranks_of_either_loop_end_with_identical_parameters(tmp_path):
    import torch.multiprocessing as mp

    mp.spawn(_rank_main, args=(2, _free_port(), str(tmp_path)), nprocs=2, join=True)
    r0, r1 = (torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1))
    for loop in ("lean", "stock"):
        assert r0[loop]["losses"] != r1[loop]["losses"], loop  # each rank trained on its own data ...
        assert r0[loop]["params"].keys() == r1[loop]["params"].keys()
        for name, value in r0[loop]["params"].items():  # ... and DDP kept the weights identical
            assert torch.equal(value, r1[loop]["params"][name]), (loop, name)


# ---------------------------------------------------------------------------- end to end


@pytest.mark.slow
def test_campaign_runs_swinv2_upernet_on_the_local_executor(ws):
    """A campaign job of the stock loop (MMEngine's own iteration, which names itself and
    times data and the rest), through harvest's scaling and breakdown tables; then a
    profiling run of the lean loop (the default). Two ranks of either loop:
    test_two_gloo_ranks_of_either_loop_end_with_identical_parameters."""
    store = f"sqlite:///{ws.path}/campaign.db"
    res = ws.launch("-m", "platform=local", "gpus=1", "trainer=swinv2_upernet", "trainer.params.variant=micro",
                    "trainer.params.loop=stock", "dataset=ade20k", "dataset.name=synthetic", "dataset.image_size=64",
                    "dataset.num_workers=0", "experiment=smoke", "experiment.images_per_gpu=2",
                    "experiment.base_iterations=3", f"results_dir={ws.path}", timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    cid = campaign_id_from(res.stdout)
    wait = ws.campaign("status", cid, "--wait", "--interval", "0.5", "--store", store)
    assert wait.returncode == 0, wait.stdout + wait.stderr
    harvest = ws.campaign("harvest", cid, "--to", "csv", "--store", store)
    assert harvest.returncode == 0, harvest.stderr
    rows = list(csv.DictReader(io.StringIO(harvest.stdout)))
    assert [(r["trainer"], r["gpus"]) for r in rows] == [("swinv2_upernet", "1")]
    assert all(float(r["time_s"]) > 0 for r in rows)
    con = sqlite3.connect(ws.path / "campaign.db")
    try:
        (config,), = con.execute("select config from point").fetchall()
        phases = con.execute("select count(*), count(data_s), count(forward_s), count(backward_s), count(step_s) "
                             "from iteration").fetchone()
    finally:
        con.close()
    assert json.loads(config)["trainer"]["params"]["loop"] == "stock"
    n = phases[0]
    assert n >= 3 and phases[1:] == (n, 0, 0, n)  # data and step every iteration, forward/backward absent
    breakdown = ws.campaign("harvest", cid, "--to", "csv", "--table", "breakdown", "--store", store)
    assert breakdown.returncode == 0, breakdown.stderr
    table = list(csv.DictReader(io.StringIO(breakdown.stdout)))
    assert {r["phase"] for r in table if r["source"] == "phases"} >= {"data", "step", "iteration"}

    res = ws.launch("platform=local", "gpus=1", "trainer=swinv2_upernet", "trainer.params.variant=micro",
                    "dataset=ade20k", "dataset.name=synthetic", "dataset.image_size=64", "dataset.num_workers=0",
                    "experiment=profile", "experiment.images_per_gpu=2", "experiment.base_iterations=2",
                    "experiment.warmup_iterations=1", "experiment.profile_iterations=2",
                    f"results_dir={ws.path}", timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    con = sqlite3.connect(ws.path / "campaign.db")
    profiles = con.execute("select rank, iterations, total_s, cpu_s, comm_s from profile").fetchall()
    con.close()
    assert len(profiles) == 1
    rank, iterations, total, cpu, _ = profiles[0]
    assert rank == 0 and iterations == 2 and total > 0 and cpu > 0
