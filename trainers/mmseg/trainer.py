"""``trainer=swinv2_upernet``: SwinV2 + UPerNet trained by MMEngine's Runner machinery.

The Runner builds what its ``train()`` builds (IterBasedTrainLoop and its dataloader,
optim wrapper, param schedulers, hooks) but does not run the loop; ``step`` runs one
iteration in one of two ways (``trainer.params.loop``):

``stock``: MMEngine's own iteration as MMSegmentation configures it, what the reference
study timed: ``next(loop.dataloader_iterator)`` (every batch through the DataLoader,
synthetic data too), then ``loop.run_iter(batch)`` (``before_train_iter``, the model's
``train_step``: data preprocessor, forward, ``parse_losses``, ``update_params``; then
``after_train_iter`` with the outputs every iteration); AmpOptimWrapper with its
GradScaler for fp16 and bf16, MMEngine's parameter group per parameter. Phases: ``data``
(the loader) and ``step`` (the rest: forward and backward are not timed apart, so
those phases are absent). The step's loss is its outputs' ``loss`` (log_vars), kept
by one hook of ours that copies nothing.

``lean`` (the default): the same iteration with its parts called one by one, so that
each phase ends on a real boundary:

- ``data``: next batch from the loader, then the model's SegDataPreProcessor (to the
  device, BGR->RGB, normalise, pad to the crop); synthetic data: the next of a few
  batches pre-made on the device (speed.py);
- ``forward``: EncoderDecoder loss forward (through DDP) and ``parse_losses``;
- ``backward``: ``optim_wrapper.backward`` (loss scaling under AMP; DDP's all-reduce
  overlaps it, so communication is inside this phase);
- ``step``: ``optim_wrapper.step``/``zero_grad`` when an update is due, then the
  ``after_train_iter`` hooks (param schedulers, runtime info, logger; the step's log
  values only on the iterations the logger logs).

What MMEngine would add beyond a plain loop (a scaler for bf16, a parameter group per
parameter, a host copy of every logged value each iteration, the data pipeline for
synthetic data) is left out: speed.py says how and why (``benchmarks/trainer_vs_plain.py
--loops lean,stock`` measures both loops against a plain one).

Validation, checkpoint and visualisation hooks are off. The process group is ours
(trainers/dist.py); MMEngine runs with ``launcher='none'`` (see compat.py).

Checkpoints (``experiment.checkpoint=true``) are campaign's own (trainers/checkpoint.py:
one file per rank, at an iteration boundary, with the Recorder's timings), not
MMEngine's CheckpointHook (rank 0 only, every N iterations, no preemption signal).
What MMEngine's ``Runner.resume`` restores beyond the model comes from the same
public ``state_dict``s it saves: the optim wrapper's (AdamW's moments, the learning
rates, a loss scaler's) and each param scheduler's (``state_dict``); ``resume_at``
then sets the loop's iteration (what ``Runner.resume`` sets) and continues the data
where it stood (both loops): synthetic batches follow the iteration (stock: the
loader's sampler, as for a dataset), a dataset's InfiniteSampler
continues past the images this rank has trained on without loading them
(``data.continued_loader``). Not kept: MMEngine's message hub (its log's smoothing
windows), the DataLoader workers' augmentation RNG (a resumed run reads the same
images in the same order, augmented afresh).
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
import weakref
from typing import Any, Optional

import torch

from trainers.dist import DistContext
from trainers.instrument import Recorder
from trainers.mmseg import compat, speed

_RUNNERS = itertools.count()  # unique MMEngine experiment names within one process


def _outputs_hook():
    """A hook, last after every iteration, keeping that iteration's outputs (the model's
    log_vars: tensors, not copied) so that the stock step can return the loss."""
    from mmengine.hooks import Hook

    class KeepOutputs(Hook):
        outputs: Any = None

        def after_train_iter(self, runner, batch_idx: int, data_batch=None, outputs=None) -> None:
            self.outputs = outputs

    return KeepOutputs()


class SwinV2UperNetTrainer:
    def __init__(self, ctx: DistContext, cfg: dict, plan: dict, work_dir: Optional[str] = None):
        threads = torch.get_num_threads()  # job.py's per-rank choice, kept through MMEngine's set-up
        compat.apply()
        from mmengine.runner import Runner
        from mmseg.registry import MODELS

        from trainers.mmseg.data import dataloader_config
        from trainers.mmseg.model import model_config, optim_wrapper_config, param_scheduler_config, params_of

        tcfg, spec = cfg["trainer"], cfg["dataset"]
        seed = int(plan["seed"])
        self.ctx = ctx
        self.loop_kind = params_of(tcfg)["loop"]  # "stock" or "lean" (module docstring)
        stock = self.loop_kind == "stock"
        self.max_iters = int(plan["warmup"]) + int(plan["iterations"]) + int(plan.get("profile_iterations") or 0)

        # Same seed on every rank: identical initial weights (DDP also broadcasts rank 0's).
        torch.manual_seed(seed)
        module = MODELS.build(model_config(cfg, ctx.device, ctx.world_size))
        with compat.quiet_logs():
            module.init_weights()  # what Runner.train() would do; loads trainer.params.pretrained
        self.trainable_params = sum(p.numel() for p in module.parameters() if p.requires_grad)
        self.model = compat.wrap_ddp(module, ctx.device, ctx.distributed)
        self.module = module

        self._own_work_dir = work_dir is None
        self.work_dir = work_dir or tempfile.mkdtemp(prefix="mmseg-runner-")  # logs only; removed by close()
        if self._own_work_dir:  # ... or at exit: a requeued attempt ends without close()
            weakref.finalize(self, shutil.rmtree, self.work_dir, ignore_errors=True)
        with compat.keep_threads(threads):
            self.runner = Runner(
                model=self.model,
                work_dir=self.work_dir,
                train_dataloader=dataloader_config(spec, batch_size=plan["batch_per_gpu"], seed=seed, rank=ctx.rank,
                                                   premade=not stock),
                train_cfg=dict(type="IterBasedTrainLoop", max_iters=self.max_iters, val_interval=self.max_iters + 1),
                optim_wrapper=optim_wrapper_config(tcfg, ctx.device, int(plan.get("grad_accum") or 1)),
                param_scheduler=param_scheduler_config(tcfg, self.max_iters),
                default_hooks=dict(
                    logger=dict(type="LoggerHook", interval=int(params_of(tcfg)["log_interval"]),
                                log_metric_by_epoch=False),
                    checkpoint=None,  # checkpoints are campaign's own (module docstring)
                ),
                launcher=compat.RUNNER_LAUNCHER,
                env_cfg=dict(cudnn_benchmark=ctx.device.type == "cuda",
                             mp_cfg=dict(mp_start_method="fork", opencv_num_threads=0)),
                visualizer=dict(type="Visualizer", vis_backends=None),  # no SegVisualizationHook, no files
                log_processor=dict(by_epoch=False),
                # WARNING: its INFO banner would say "launcher none, distributed False" even over
                # several ranks (compat trap 2); the timing rows go to the results store.
                log_level="WARNING",
                randomness=dict(seed=seed),
                default_scope="mmseg",
                experiment_name=f"swinv2_upernet_r{ctx.rank}_{next(_RUNNERS)}",
            )
            runner = self.runner
            # Runner.train() up to train_loop.run(), minus weight init (done above).
            runner._train_loop = runner.build_train_loop(runner._train_loop)
            runner.optim_wrapper = runner.build_optim_wrapper(runner.optim_wrapper)
            if not stock:  # stock keeps MMEngine's group per parameter
                speed.merge_param_groups(runner.optim_wrapper.optimizer)  # before the schedulers read the groups
            runner.scale_lr(runner.optim_wrapper, runner.auto_scale_lr)
            runner.param_schedulers = runner.build_param_scheduler(runner.param_schedulers)
            self._outputs = None
            if stock:
                self._outputs = _outputs_hook()
                runner.register_hook(self._outputs, priority="LOWEST")
            runner.call_hook("before_run")
            runner.optim_wrapper.initialize_count_status(self.model, 0, self.max_iters)
            # IterBasedTrainLoop.run() up to its while loop.
            runner.call_hook("before_train")
            runner.call_hook("before_train_epoch")
        self.loop = runner.train_loop
        self.optim_wrapper = runner.optim_wrapper
        self.model.train()  # run() does it every iteration because validation may switch it off; none here
        self.images_per_step = int(plan["batch_per_gpu"])
        self.log_interval = int(params_of(tcfg)["log_interval"])
        # What the step computes in (trainers/flops.py): the wrapper's autocast dtype on a GPU.
        precision = str(tcfg.get("precision") or "fp32")
        self.precision = precision if ctx.device.type == "cuda" else "fp32"
        self._batches = (speed.device_batches(self.loop.dataloader_iterator, self.module.data_preprocessor)
                         if (spec.get("name") or "synthetic") == "synthetic" and not stock else None)
        self._closed = False

    def step(self, rec: Recorder) -> torch.Tensor:
        """One IterBasedTrainLoop iteration: MMEngine's own (stock) or phase by phase
        (lean; module docstring)."""
        if self._outputs is not None:
            return self._stock_step(rec)
        runner, loop, ow = self.runner, self.loop, self.optim_wrapper
        if self._batches is not None:  # synthetic: pre-made on the device
            batch, data = self._batches[loop.iter % len(self._batches)]
        else:
            batch, data = next(loop.dataloader_iterator), None
        runner.call_hook("before_train_iter", batch_idx=loop.iter, data_batch=batch)
        # model.train_step(batch, ow), inlined (BaseModel / MMDistributedDataParallel):
        with ow.optim_context(self.model):
            if data is None:
                data = self.module.data_preprocessor(batch, True)
            rec.mark("data")
            losses = self.model._run_forward(data, mode="loss")
        loss, log_vars = self.module.parse_losses(losses)
        rec.mark("forward")
        # optim_wrapper.update_params(loss), inlined:
        ow.backward(ow.scale_loss(loss))
        rec.mark("backward")
        if ow.should_update():
            ow.step()
            ow.zero_grad()
        runner.call_hook("after_train_iter", batch_idx=loop.iter, data_batch=batch,
                         outputs=log_vars if speed.logs_at(loop.iter, self.log_interval) else None)
        loop._iter += 1  # run_iter's own bookkeeping (read by the hooks)
        rec.mark("step")
        return loss

    def _stock_step(self, rec: Recorder) -> torch.Tensor:
        """One iteration of ``IterBasedTrainLoop.run()``'s while loop, as it is (its
        validation check aside: this runner has no val loop)."""
        loop = self.loop
        self.model.train()
        batch = next(loop.dataloader_iterator)
        rec.mark("data")
        loop.run_iter(batch)  # hooks, model.train_step(batch, optim_wrapper), hooks, iteration + 1
        rec.mark("step")
        return self._outputs.outputs["loss"]

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps beyond the model (trainers/checkpoint.py): the optim
        wrapper's and the LR schedule's state, MMEngine's own ``state_dict``s."""
        return {"optim_wrapper": self.optim_wrapper.state_dict(),
                "param_schedulers": [s.state_dict() for s in self.runner.param_schedulers]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore ``state_dict()``'s state (before ``resume_at``)."""
        schedulers = self.runner.param_schedulers
        if len(state["param_schedulers"]) != len(schedulers):  # the fingerprint makes this another run's bug
            raise ValueError(f"checkpoint has {len(state['param_schedulers'])} param schedulers, "
                             f"this run {len(schedulers)}")
        self.optim_wrapper.load_state_dict(dict(state["optim_wrapper"]))
        for scheduler, saved in zip(schedulers, state["param_schedulers"]):
            scheduler.load_state_dict(saved)

    def resume_at(self, iteration: int) -> None:
        """Continue a checkpointed run at ``iteration``: the loop's count (the hooks',
        the synthetic batches' and gradient accumulation's), and a dataset's position."""
        from trainers.mmseg.data import continued_loader

        iteration = int(iteration)
        self.loop._iter = iteration  # what Runner.resume sets (the loop has no setter)
        self.optim_wrapper.initialize_count_status(self.model, iteration, self.max_iters)
        if self._batches is None and iteration > 0:
            # A fresh loader whose sampler continues where this rank's stood; the one made
            # at set-up (its workers may have prefetched from the start) is dropped.
            loader = continued_loader(self.loop.dataloader, iteration * self.images_per_step)
            self.loop.dataloader = loader
            # A new iterator draws its base seed from torch's RNG, which the checkpoint has
            # just restored: without the fork, dropout would follow another sequence.
            with torch.random.fork_rng(devices=[]):
                self.loop.dataloader_iterator = iter(loader)

    def close(self) -> None:
        """End the loop as IterBasedTrainLoop.run()/Runner.train() do and drop the work dir."""
        if self._closed:
            return
        self._closed = True
        self.runner.call_hook("after_train_epoch")
        self.runner.call_hook("after_train")
        self.runner.call_hook("after_run")
        if self._own_work_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)


def build(ctx: DistContext, cfg: dict, plan: dict) -> SwinV2UperNetTrainer:
    """The registry factory (trainers/registry.py)."""
    return SwinV2UperNetTrainer(ctx, cfg, plan)
