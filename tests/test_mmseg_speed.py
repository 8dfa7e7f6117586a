"""The SwinV2 trainer leaves out what MMEngine adds to a step beyond a plain loop
(trainers/mmseg/speed.py): no scaler for bf16, parameter groups merged, no host copy
of the log values on iterations that do not log, synthetic batches pre-made on the
device. Each change keeps the training it replaces: same updates, same loss."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("mmseg")
pytest.importorskip("timm")

from trainers.mmseg import compat  # noqa: E402

compat.apply()

from trainers.instrument import Recorder  # noqa: E402
from trainers.mmseg import model as mmodel  # noqa: E402
from trainers.mmseg import speed  # noqa: E402
from trainers.mmseg.trainer import build  # noqa: E402
from test_mmseg import CPU, job_cfg, single_ctx  # noqa: E402

PLAN = {"batch_per_gpu": 2, "iterations": 4, "warmup": 0, "seed": 0}


def _steps(trainer, n: int) -> list[float]:
    rec = Recorder(CPU, warmup=0)
    losses = []
    for _ in range(n):
        rec.begin()
        losses.append(trainer.step(rec))
        rec.end(losses[-1], trainer.images_per_step)
    rec.finish()
    return [r["loss"] for r in rec.rows()]


def test_bf16_autocasts_without_a_scaler():
    assert compat.optim_wrapper_type(torch.device("cuda", 0), "bf16") == {"type": "AutocastOptimWrapper",
                                                                         "dtype": "bfloat16"}
    from mmengine.optim import build_optim_wrapper

    net = torch.nn.Linear(8, 8)
    ow = build_optim_wrapper(net, dict(type="AutocastOptimWrapper", dtype="bfloat16",
                                       optimizer=dict(type="SGD", lr=0.1)))
    assert not hasattr(ow, "loss_scaler")  # no GradScaler: no inf check (.item()) per step
    with ow.optim_context(net):  # on this CPU-only machine MMEngine's autocast is the CPU one
        out = net(torch.randn(2, 8))
    assert out.dtype == torch.bfloat16


def test_parameter_groups_merge_into_one_per_setting_with_the_same_settings():
    from mmengine.optim import build_optim_wrapper

    from mmseg.registry import MODELS

    cfg = job_cfg()
    model = MODELS.build(mmodel.model_config(cfg, CPU, 1))
    per_param = build_optim_wrapper(model, mmodel.optim_wrapper_config(cfg["trainer"], CPU)).optimizer
    before = {id(p): (g["lr"], g["weight_decay"]) for g in per_param.param_groups for p in g["params"]}
    assert len(per_param.param_groups) == len(before)  # MMEngine: one group per parameter
    merged = copy.deepcopy(per_param)
    ids = {id(a): id(b) for a, b in zip((p for g in merged.param_groups for p in g["params"]),
                                        (p for g in per_param.param_groups for p in g["params"]))}
    # decay; no decay (norms); no decay by custom key (the group also says decay_mult=0)
    assert speed.merge_param_groups(merged) == 3
    after = {ids[id(p)]: (g["lr"], g["weight_decay"]) for g in merged.param_groups for p in g["params"]}
    assert after == before  # every parameter keeps its settings, in exactly one group


def test_merged_groups_update_the_parameters_as_the_per_parameter_ones():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8), torch.nn.Linear(8, 2))
    twin = copy.deepcopy(net)
    groups = [{"params": [p], "weight_decay": 0.0 if p.dim() == 1 else 0.01} for p in net.parameters()]
    a = torch.optim.AdamW(groups, lr=1e-2)
    b = torch.optim.AdamW([{"params": [p], "weight_decay": 0.0 if p.dim() == 1 else 0.01}
                           for p in twin.parameters()], lr=1e-2)
    speed.merge_param_groups(b)
    x = torch.randn(4, 8)
    for _ in range(3):
        for model, opt in ((net, a), (twin, b)):
            opt.zero_grad()
            model(x).square().sum().backward()
            opt.step()
    for p, q in zip(net.parameters(), twin.parameters()):
        assert torch.allclose(p, q, atol=1e-7)


def test_the_hooks_get_the_log_values_only_where_the_logger_logs():
    """MMEngine's message hub turns a tensor into a float with ``.item()`` (a host-device
    synchronisation on a GPU): it gets the step's tensors only on logging iterations."""
    trainer = build(single_ctx(), job_cfg({"log_interval": 3}), PLAN)
    hub = trainer.runner.message_hub
    copies = []
    update = hub.update_scalar

    def counted(key, value, *args, **kwargs):
        if isinstance(value, torch.Tensor):
            copies.append((trainer.loop.iter, key))
        return update(key, value, *args, **kwargs)

    hub.update_scalar = counted
    try:
        _steps(trainer, 6)
    finally:
        trainer.close()
    assert {i for i, _ in copies} == {2, 5}  # the logging iterations (every 3rd), never the others
    assert {k for _, k in copies} >= {"train/loss", "train/decode.loss_ce", "train/aux.loss_ce"}
    assert len(hub.get_scalar("train/loss").data[0]) == 2


def test_synthetic_batches_are_premade_on_the_device():
    trainer = build(single_ctx(), job_cfg(length=4), PLAN)
    try:
        assert len(trainer._batches) == speed.SYNTHETIC_BATCHES
        inputs = [data["inputs"] for _, data in trainer._batches]
        assert all(t.device.type == "cpu" and t.dtype == torch.float32 and t.shape == (2, 3, 128, 128) for t in inputs)

        def no_more(*_):
            raise AssertionError("the loader was asked for a batch")

        trainer.loop.dataloader_iterator.__next__ = no_more
        calls = []
        pre = trainer.module.data_preprocessor
        pre.register_forward_hook(lambda *a: calls.append(1))
        losses = _steps(trainer, 4)
    finally:
        trainer.close()
    assert calls == [] and all(x == x for x in losses)  # no preprocessing per step, finite losses


def test_logs_at_follows_mmengines_every_n_iters():
    assert [i for i in range(10) if speed.logs_at(i, 3)] == [2, 5, 8]
    assert not any(speed.logs_at(i, 0) for i in range(5))


def test_synthetic_data_starts_no_worker_processes():
    from trainers.mmseg.data import dataloader_config

    spec = job_cfg(num_workers=4)["dataset"]
    cfg = dataloader_config(spec, batch_size=2, seed=0, rank=0)
    assert cfg["num_workers"] == 0 and cfg["persistent_workers"] is False
