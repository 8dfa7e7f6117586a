"""``trainer.params.loop=stock|lean`` of trainer=swinv2_upernet, on CPU.

stock runs MMEngine's own iteration as MMSegmentation configures it (the reference
study's: ``IterBasedTrainLoop.run_iter`` every iteration, AmpOptimWrapper with its
scaler for bf16, a parameter group per parameter, every batch through the DataLoader
and the data preprocessor); lean (the default) is the inlined step of
trainers/mmseg/speed.py. Each test proves which loop ran, that both train the same
model alike, and that stock checkpoints and resumes. Micro variant, 64x64 crops. Both
loops on two gloo ranks, and a campaign job of the stock loop that names it: tests/test_mmseg.py.
"""

from __future__ import annotations

import pytest

pytest.importorskip("mmseg")
import torch  # noqa: E402

from trainers.mmseg import compat  # noqa: E402

compat.apply()
from mmengine.runner import IterBasedTrainLoop  # noqa: E402

from trainers.mmseg import model as mmodel  # noqa: E402
from trainers.mmseg.trainer import build  # noqa: E402
from test_mmseg import job_cfg, run_steps, single_ctx  # noqa: E402

PLAN = {"batch_per_gpu": 2, "iterations": 4, "warmup": 0, "seed": 0}
CUDA = torch.device("cuda", 0)  # only named: the wrapper configs are plain dicts, built on no device


def _trainer(loop: str, params=None, **dataset):
    torch.set_num_threads(1)
    return build(single_ctx(), job_cfg(dict(params or {}, loop=loop), **dict({"image_size": 64}, **dataset)), PLAN)


@pytest.fixture
def run_iter_calls(monkeypatch):
    """Every ``IterBasedTrainLoop.run_iter`` call (MMEngine's own iteration), still run."""
    calls = []
    real = IterBasedTrainLoop.run_iter

    def spy(self, data_batch):
        calls.append(self.iter)
        return real(self, data_batch)

    monkeypatch.setattr(IterBasedTrainLoop, "run_iter", spy)
    return calls


@pytest.mark.parametrize("loop", ["stock", "lean"])
def test_stock_runs_mmengines_run_iter_every_iteration_and_lean_never(run_iter_calls, loop):
    trainer = _trainer(loop)
    try:
        rows = run_steps(trainer, 3)
    finally:
        trainer.close()
    assert trainer.loop.iter == 3 and trainer.loop_kind == loop
    if loop == "stock":
        assert run_iter_calls == [0, 1, 2]
        # run_iter is one call: data then the rest; forward and backward are absent, not zero
        assert all(r["data_s"] is not None and r["step_s"] is not None for r in rows)
        assert all(r["forward_s"] is None and r["backward_s"] is None for r in rows)
    else:
        assert run_iter_calls == []
        assert all(r[p] is not None for r in rows for p in ("data_s", "forward_s", "backward_s", "step_s"))
    assert all(isinstance(r["loss"], float) and r["loss"] > 0 for r in rows)


def test_stock_keeps_mmengines_group_per_parameter_and_lean_merges_them():
    stock, lean = _trainer("stock"), _trainer("lean")
    try:
        params = [p for p in stock.module.parameters() if p.requires_grad]
        groups = stock.optim_wrapper.optimizer.param_groups
        assert len(groups) == len(params) and all(len(g["params"]) == 1 for g in groups)
        assert len(lean.optim_wrapper.optimizer.param_groups) == 3  # decay, norms, custom keys
        assert type(stock.optim_wrapper).__name__ == type(lean.optim_wrapper).__name__ == "OptimWrapper"  # CPU: fp32
    finally:
        stock.close(), lean.close()


@pytest.mark.parametrize("precision,loop,expected", [
    ("bf16", "stock", {"type": "AmpOptimWrapper", "dtype": "bfloat16", "loss_scale": "dynamic"}),
    ("bf16", "lean", {"type": "AutocastOptimWrapper", "dtype": "bfloat16"}),
    ("fp16", "stock", {"type": "AmpOptimWrapper", "dtype": "float16", "loss_scale": "dynamic"}),
    ("fp16", "lean", {"type": "AmpOptimWrapper", "dtype": "float16", "loss_scale": "dynamic"}),
    ("fp32", "stock", {"type": "OptimWrapper"}),
])
def test_the_wrapper_is_mmsegs_for_stock_and_scaler_free_bf16_for_lean(precision, loop, expected):
    tcfg = dict(job_cfg({"loop": loop})["trainer"], precision=precision)
    cfg = mmodel.optim_wrapper_config(tcfg, CUDA)
    assert {k: cfg[k] for k in expected} == expected
    on_cpu = mmodel.optim_wrapper_config(tcfg, torch.device("cpu"))
    assert on_cpu["type"] == "OptimWrapper"  # AmpOptimWrapper asserts a GPU (compat trap 6)


def test_stock_reads_every_batch_through_the_loader_and_the_preprocessor():
    trainer = _trainer("stock", length=4)
    calls, logged = [], []
    trainer.module.data_preprocessor.register_forward_hook(lambda *a: calls.append(1))
    hub = trainer.runner.message_hub
    update = hub.update_scalar

    def counted(key, value, *args, **kwargs):  # what RuntimeInfoHook does with the outputs
        if key == "train/loss" and isinstance(value, torch.Tensor):
            logged.append(trainer.loop.iter)
        return update(key, value, *args, **kwargs)

    hub.update_scalar = counted
    try:
        assert trainer._batches is None  # nothing pre-made
        run_steps(trainer, 3)
    finally:
        trainer.close()
    assert len(calls) == 3  # one preprocessing per iteration
    assert logged == [0, 1, 2]  # the hooks get the outputs every iteration (log_interval 50)


def test_both_loops_start_on_the_same_loss_trajectory():
    """Same seed, weights and first batches: stock's per-parameter groups update as lean's
    merged ones; later the loops' batches differ only in order (lean cycles two
    pre-made batches, stock reads on), so the losses stay close."""
    losses = {}
    for loop in ("stock", "lean"):
        trainer = _trainer(loop, length=2)  # 2 samples, batch 2: the same images every step
        try:
            losses[loop] = [r["loss"] for r in run_steps(trainer, 4)]
        finally:
            trainer.close()
    assert losses["stock"][:2] == pytest.approx(losses["lean"][:2], rel=1e-5)
    assert losses["stock"] == pytest.approx(losses["lean"], rel=2e-3)
    assert losses["stock"][-1] < losses["stock"][0]


def test_an_unknown_loop_is_refused_with_the_choices():
    with pytest.raises(ValueError, match=r"^unknown trainer.params.loop 'bogus'; available: lean, stock$"):
        mmodel.params_of(job_cfg({"loop": "bogus"})["trainer"])


def test_an_unknown_loop_is_refused_at_launch_in_one_line(ws):
    res = ws.launch("trainer=swinv2_upernet", "trainer.params.loop=bogus", "--dry-run")
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr == "error: unknown trainer.params.loop 'bogus' for trainer=swinv2_upernet; valid: lean, stock\n"


@pytest.mark.slow
def test_a_stopped_stock_run_resumes_as_the_run_never_stopped(tmp_path):
    import signal

    from test_mmseg_checkpoint import STOP, TOTAL, _attempt
    from test_mmseg_checkpoint import job_cfg as ckpt_cfg
    from trainers.checkpoint import Requeue
    from trainers.dist import DistContext

    cfg = ckpt_cfg()
    cfg["trainer"]["params"]["loop"] = "stock"
    ctx = DistContext(rank=0, world_size=1, local_rank=0, local_world_size=1, num_nodes=1,
                      device=torch.device("cpu"), backend="none", emulated=False, host="here")
    saved, threads = signal.getsignal(signal.SIGUSR2), torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with pytest.raises(Requeue):
            _attempt(ctx, tmp_path, 0, signal_after=STOP, cfg=cfg)
        trainer, rec, _, resumed, lrs = _attempt(ctx, tmp_path, 1, cfg=cfg)
        fresh, fresh_rec, _, _, fresh_lrs = _attempt(ctx, tmp_path / "fresh", 0, cfg=cfg)
    finally:
        torch.set_num_threads(threads)
        signal.signal(signal.SIGUSR2, saved)
    assert resumed == STOP and trainer.loop.iter == TOTAL and trainer.loop_kind == "stock"
    assert [r["loss"] for r in rec.rows()] == [r["loss"] for r in fresh_rec.rows()]
    assert lrs == fresh_lrs[STOP:]
    for (name, a), b in zip(trainer.module.state_dict().items(), fresh.module.state_dict().values()):
        assert torch.equal(a, b), name
    groups = trainer.optim_wrapper.optimizer.param_groups
    assert len(groups) == sum(p.requires_grad for p in trainer.module.parameters())  # still one per parameter
