"""The frozen-backbone study: a frozen torchvision backbone under a trained classifier,
on MNIST (grey 28x28 resized to the backbone's input, 3 channels) or synthetic images
of the same shape, trained with SGD and cross-entropy by one of three engines:

- ``ddp``: DistributedDataParallel, one rank per GPU; comm = the gradient all-reduce,
  timed bucket by bucket by the job's hook (trainers.comm; it overlaps ``backward``);
- ``dataparallel``: nn.DataParallel in ONE process over all the job's GPUs; comm =
  scatter + replicate + gather (its gradient reduction runs inside backward);
- ``vanilla``: ``trainers.parallel.HandDataParallel`` in one process; comm = replicate +
  scatter + gather + the explicit gradient reduction onto the first device.

``procs_per_node`` k > 1 (dataparallel, vanilla) starts k such processes on the node, as the
DataParallel study's ``torch.distributed.run`` did (2), read as ``procs_split`` says
(trainers/specs/_backbone_costs.py): ``literal``, each drives all the job's GPUs over the same
device IDs, on the whole training split in the same order at the whole batch; ``split``, each
drives its own share of the GPUs (GPU rank % gpus where there are fewer) on its shard of the
split at 1/k of the batch, so that a GPU does one process's work. Either way they meet only
in the study's barrier after the update (``study_timing``; trainers/dist.py puts them on gloo);
``gpu_images`` records, per iteration, the images this process put on each GPU id.

Computation is zero_grad + forward + loss (phase ``forward``), backward, step. One iteration
is one optimizer step of ``experiment.grad_accum`` micro-batches of the process's batch (as
vit's: each micro-batch's mean loss divided by their count, so the update is the one of
their union; DDP all-reduces on the last only, ``no_sync()`` before; the hand-built module
reduces its replicas' gradients once, after the last; nn.DataParallel's replicas hand theirs
back in every backward), so an epoch takes 1/k of the iterations and trains the same images
(campaign/launch/plan.py: iterations_per_epoch). Trainer
params (``trainer.params``): backbone, hidden, classifier, dropout, weights (null, a PATH,
or a torchvision weights name the launch fetched: the backbone loads ``weights_file``),
image_size, engine, mode (train | inference), loss_threshold, study_timing,
procs_per_node, stop_at_threshold (the study's own timing rows ``study.*`` and its stop rule:
trainers/dp_study.py). ``summary_extra()`` adds to the rank's summary the weights file it
loaded (``weights_file``), the synchronisation volume per epoch (N / (B k) x trainable
parameters) and the
first iteration (``iter``, warm-up counted) whose loss fell below ``loss_threshold``;
``epoch_<i>`` breakdown rows time each epoch (warm-up in epoch 0), and with
``experiment.validation=true`` the test split is evaluated after every epoch
(trainers/evaluate.py). ``experiment.dataset_fraction_per_gpu`` f trains on min(1, f x gpus)
of the training set, as vit does (trainers.data.dataset_fraction).
"""

from __future__ import annotations

import contextlib
from typing import Any, Optional

import torch
from torch import nn

from trainers.data import EpochBatches, build_dataset, build_loader, dataset_fraction
from trainers.dist import DistContext
from trainers.dp_study import StudyTiming, ThresholdStop
from trainers.evaluate import build_evaluator, epoch_rows
from trainers.instrument import Recorder
from trainers.models.classifier import INPUT_SIZE, build_classifier, trainable_params
from trainers.optim import build_optimizer
from trainers.parallel import HandDataParallel, StageClock, breakdown_row, dp_forward
from trainers.registry import engine_of
from trainers.specs._backbone_costs import SPLIT, process_gpus, process_images, scatter_sizes
from trainers.specs.frozen_backbone import TRAINER, head_of

ENGINES = TRAINER.engines  # declared once, in trainers/specs/frozen_backbone.py


def job_devices(ctx: DistContext, gpus: int, ids: Optional[list[int]] = None) -> list[torch.device]:
    """The CUDA devices one single-process engine drives: the job's first ``gpus``, or those of
    them ``ids`` names (its share: ``procs_split=split``); none on CPU."""
    if ctx.device.type != "cuda":
        return []
    visible = torch.cuda.device_count()
    if visible < gpus:
        raise RuntimeError(f"the job asked for {gpus} GPUs but this process sees {visible}; "
                           f"each process of a single-process engine needs all of them")
    return [torch.device("cuda", i) for i in (range(gpus) if ids is None else ids)]


def process_batch(exp: dict, batch_per_gpu: int, devices: int) -> int:
    """This process's batch: one rank's (ddp, or one device), else what all its devices
    share: strong scaling's global batch, which nn.DataParallel's scatter (and the
    hand-built module's, the same torch.chunk) may split unevenly (1,024 over 3 GPUs: 342,
    342, 340; campaign.launch.plan.schedule allows it for these engines), else images per GPU x devices."""
    if devices > 1 and exp.get("scaling") == "strong" and exp.get("global_batch"):
        return int(exp["global_batch"])
    return batch_per_gpu * max(1, devices)


def sync_volume(dataset_size: int, batch_per_gpu: int, gpus: int, trainable: int, element_size: int = 4,
                images_per_iteration: Optional[int] = None, grad_accum: int = 1,
                reductions_per_iteration: int = 1) -> dict:
    """What one epoch synchronises: N / (B k a) iterations (B k: ``images_per_iteration``,
    batch_per_gpu x gpus unless given: an uneven split; a: ``grad_accum`` micro-batches an
    iteration), each moving every trainable parameter's gradient ``reductions_per_iteration``
    times (once: DDP and the hand-built module reduce after the last micro-batch only;
    nn.DataParallel in every backward: a) (nothing with one GPU)."""
    iterations = dataset_size / ((images_per_iteration or batch_per_gpu * gpus) * max(1, grad_accum))
    moved = iterations * trainable * reductions_per_iteration if gpus > 1 else 0.0
    return {"dataset_size": dataset_size, "batch_per_gpu": batch_per_gpu, "gpus": gpus, "grad_accum": grad_accum,
            "iterations_per_epoch": iterations, "sync_params_per_epoch": moved,
            "sync_bytes_per_epoch": moved * element_size}


def weights_file(params: dict) -> Optional[str]:
    """The state-dict file the backbone loads (None: random init): ``weights_file``, which the
    launch resolved ``weights`` to (a torchvision name: the file it fetched into
    <results_dir>/weights/; a PATH: that file, absolute), else a PATH ``weights`` gives."""
    from trainers.specs._torchvision_weights import is_path

    given = params.get("weights") or None
    if params.get("weights_file"):
        return str(params["weights_file"])
    if given and not is_path(str(given)):
        raise RuntimeError(f"trainer.params.weights={given} names torchvision weights but no weights_file says "
                           "where the launch put them; launch through campaign, which fetches them")
    return given


def weights_digest(params: dict, path: Optional[str]) -> Optional[str]:
    """The sha256 the weights file must have: the launch's record (``weights_sha256``), else
    for a torchvision name the prefix its file name carries (trainers/state_file.py)."""
    from trainers.specs._torchvision_weights import is_path
    from trainers.state_file import expected

    given = params.get("weights")
    return expected(path, params.get("weights_sha256"), named=bool(given) and not is_path(str(given))) if path else None


class FrozenBackboneTrainer:
    def __init__(self, ctx: DistContext, cfg: dict, plan: dict):
        data, tcfg = cfg["dataset"], cfg["trainer"]
        p = tcfg.get("params") or {}
        self.ctx = ctx
        self.engine = engine_of(p, ENGINES)
        self.mode = str(p.get("mode") or "train")
        # micro-batches per optimizer step (inference: refused at launch; forward only, one batch)
        self.accum = max(1, int(plan.get("grad_accum") or 1)) if self.mode == "train" else 1
        # dataparallel/vanilla: procs_per_node processes (the study's torch.distributed.run at 2),
        # each driving all the job's GPUs on the whole split; they meet in the study's barrier only
        self.procs = int(p.get("procs_per_node") or 1) if self.engine != "ddp" else ctx.world_size
        if self.engine != "ddp" and ctx.world_size != self.procs:
            raise RuntimeError(f"engine={self.engine} with procs_per_node={self.procs} runs {self.procs} "
                               f"process(es) each holding all the job's GPUs, not {ctx.world_size} ranks")
        gpus = int(cfg.get("gpus", 1))
        # procs_split: literal (every process all the node's GPUs, the whole split and batch) or
        # split (its share of each); the GPU ids it drives, real on CUDA, named on CPU
        self.reading = str(p.get("procs_split") or "literal") if self.engine != "ddp" else "literal"
        self.split = self.reading == SPLIT and self.procs > 1
        per_node = max(1, gpus // max(1, ctx.num_nodes))
        self.gpu_ids = ([ctx.local_rank % per_node] if self.engine == "ddp"
                        else process_gpus(self.reading, self.procs, ctx.local_rank, per_node))
        self.devices = [] if self.engine == "ddp" else job_devices(ctx, gpus, self.gpu_ids if self.split else None)
        if self.devices and self.devices[0].type == "cuda":
            # the current device is the process's first GPU (under split, not GPU 0): the stage
            # clock's CUDA events and streams are recorded where this process computes
            torch.cuda.set_device(self.devices[0])
        self.gpu_images: list[dict[int, int]] = []  # per iteration: GPU id -> images this process put on it
        torch.manual_seed(plan["seed"])  # same head on every rank
        self.weights_file = weights_file(p)
        model = build_classifier(
            str(p.get("backbone", "resnet18")), hidden=int(p.get("hidden", 4096)),
            classifier=head_of(p), num_classes=int(data.get("num_classes") or 10),
            dropout=float(p.get("dropout", 0.5)), weights=self.weights_file,
            weights_sha256=weights_digest(p, self.weights_file),
        ).to(self.devices[0] if self.devices else ctx.device)  # nn.DataParallel's module sits on its first device
        self.trainable_params = trainable_params(model)
        if self.engine == "ddp" and ctx.distributed:
            model = nn.parallel.DistributedDataParallel(
                model, device_ids=[ctx.device] if ctx.device.type == "cuda" else None,
                broadcast_buffers=False)  # the backbone's buffers are frozen
        elif self.engine == "dataparallel":
            model = nn.DataParallel(model, device_ids=[d.index for d in self.devices] or None)
        elif self.engine == "vanilla":
            model = HandDataParallel(model, self.devices)
        self.model = model
        self.model.train(self.mode == "train")
        self.optimizer = build_optimizer(model, tcfg) if self.mode == "train" else None
        self.loss_fn = nn.CrossEntropyLoss()

        # ranks sharing the data: dataparallel/vanilla read the whole split in every process
        # (literal: the study's text names no sampler; same seed, same order: their models stay
        # equal), or a shard each at 1/k of the batch (split: an epoch is N/B iterations either way)
        ranks = ctx.world_size if self.engine == "ddp" or self.split else 1
        exp = cfg.get("experiment") or {}
        # the point's GPUs, named on CPU too (so an epoch is the launch's N/B iterations there); ddp: one GPU's
        whole = process_batch(exp, plan["batch_per_gpu"], 0 if self.engine == "ddp" else per_node)
        self.batch = process_images(SPLIT, self.procs, whole) if self.split else whole
        image_size = int(p.get("image_size") or INPUT_SIZE)
        # experiment.dataset_fraction_per_gpu: the share of the job's GPUs, as vit's and as
        # the launch's epoch arithmetic count it (else dataset.fraction)
        self.fraction = dataset_fraction(cfg, gpus)
        dataset = build_dataset(dict(data, fraction=self.fraction), train=True, image_size=image_size, channels=3,
                                seed=plan["seed"])
        self.loader = build_loader(dataset, batch_size=self.batch, rank=ctx.rank if ranks > 1 else 0,
                                   world_size=ranks, seed=plan["seed"], num_workers=int(data.get("num_workers") or 0))
        self.images_per_step = self.batch * self.accum
        self.batches = EpochBatches(self.loader)
        # experiment.validation: the test split after every epoch, outside the timed window
        self.evaluator = build_evaluator(
            ctx, cfg, module=getattr(model, "module", model), batches=self.batches, image_size=image_size,
            batch_size=self.batch, ranks=ctx.world_size if self.engine == "ddp" else 1,
            rank=ctx.rank if self.engine == "ddp" else 0,
            device=self.devices[0] if self.devices else ctx.device, seed=plan["seed"])
        self._rec: Optional[Recorder] = None  # the timed window's (the profiler window brings another)
        self._epoch_of: list[int] = []  # epoch of each iteration: the epoch_<i> rows
        self.clock = StageClock(ctx.device)
        self.window = (plan["warmup"], plan["warmup"] + plan["iterations"])
        self.loss_threshold = p.get("loss_threshold")
        self._losses: list[torch.Tensor] = []
        self.dataset_size = len(dataset)
        self.sync = sync_volume(self.dataset_size // ranks if self.split else self.dataset_size, plan["batch_per_gpu"],
                                len(self.gpu_ids) if self.split else gpus, self.trainable_params,
                                images_per_iteration=self.batch if self.devices or self.split else None,
                                grad_accum=self.accum,
                                reductions_per_iteration=self.accum if self.engine == "dataparallel" else 1)
        self.sync.update(engine=self.engine, mode=self.mode, procs_per_node=self.procs if self.engine != "ddp" else None,
                         procs_split=self.reading if self.engine != "ddp" else None, gpu_ids=list(self.gpu_ids))
        # The study's own timings and stop rule (trainers/dp_study.py)
        self.study = StudyTiming(ctx, self.devices) if p.get("study_timing") else None
        self.stop_rule = (ThresholdStop(ctx, float(self.loss_threshold))
                          if p.get("stop_at_threshold") and self.mode == "train" else None)

    # ---------------------------------------------------------------- data
    @property
    def epoch(self) -> int:
        return self.batches.epoch

    def _next(self) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = self.batches.next()
        # the images this process hands each of its GPU ids (nn.DataParallel's torch.chunk)
        step = self.gpu_images[-1]  # this iteration's (step() opens it): micro-batches add up
        for g, n in zip(self.gpu_ids, scatter_sizes(int(x.shape[0]), len(self.gpu_ids))):
            step[g] = step.get(g, 0) + n
        first = self.devices[0] if self.devices else self.ctx.device
        return x.to(first, non_blocking=True), y.to(first, non_blocking=True)

    # ---------------------------------------------------------------- one iteration
    def step(self, rec: Recorder) -> Optional[torch.Tensor]:
        if self._rec is None:
            self._rec = rec
        self.gpu_images.append({})
        self.clock.start()

        def lap(phase: str, stage: str) -> None:
            rec.mark(phase)
            self.clock.lap(stage)

        if self.mode == "inference":
            x, _ = self._next()
            self._epoch_of.append(self.epoch)
            lap("data", "data")
            with torch.no_grad():
                if self.study is not None:
                    self.study.inference(lambda: self._forward(x, lap))
                    lap("comm", "study_sync")
                else:
                    self._forward(x, lap)
            return None
        ddp = isinstance(self.model, nn.parallel.DistributedDataParallel)
        total = None
        for k in range(self.accum):
            x, y = self._next()
            lap("data", "data")
            if k == 0:
                if self.study is not None:  # the study's computation: zero_grad .. the update
                    self.study.start()
                self.optimizer.zero_grad(set_to_none=True)
            last = k == self.accum - 1
            # DDP: gradients stay local until the last micro-batch's backward all-reduces their sum
            with self.model.no_sync() if ddp and not last else contextlib.nullcontext():
                out = self._forward(x, lap)
                loss = self.loss_fn(out, y)
                lap("forward", "loss")
                (loss / self.accum if self.accum > 1 else loss).backward()
                lap("backward", "backward")
            total = loss.detach() if total is None else total + loss.detach()
        self._epoch_of.append(self.epoch)  # the epoch of its last micro-batch, as vit's
        loss = total / self.accum
        if isinstance(self.model, HandDataParallel):
            self.model.reduce_gradients()
            lap("comm", "reduce_gradients")
        else:  # DDP all-reduced during backward (the job's hook times it), DataParallel too
            lap("comm", "_")
        self.optimizer.step()
        lap("step", "step")
        if self.study is not None:
            self.study.after_update()
            lap("comm", "study_barrier")  # the barrier is communication in campaign's phases too
        self._losses.append(loss.detach())
        if self.stop_rule is not None:
            self.stop_rule.add(loss)
        return loss

    def stop_now(self) -> bool:
        """After an iteration, outside it (trainers/loop.py): whether the stop rule ends the
        run here, at the end of an epoch (a collective with several ranks, every rank at the
        same iteration: their shards have the same number of batches)."""
        if self.stop_rule is None or self.batches.ended != self._epoch_of[-1]:
            return False
        return self.stop_rule.epoch_ended(self.batches.ended)

    def _forward(self, x: torch.Tensor, lap) -> torch.Tensor:
        if isinstance(self.model, HandDataParallel):
            return self.model.timed_forward(x, lap)
        if isinstance(self.model, nn.DataParallel):
            return dp_forward(self.model, x, lap)
        out = self.model(x)
        lap("forward", "forward")
        return out

    # ---------------------------------------------------------------- results
    def breakdown_rows(self) -> list[dict]:
        """Per-stage seconds of the timed window, one row per stage (``<engine>.<stage>``:
        data, scatter, replicate, parallel_apply, gather, loss, backward, reduce_gradients,
        step; ``ddp.forward`` for DDP, whose all-reduce the Recorder's rows report)."""
        stages = self.clock.seconds(*self.window)
        rows = [breakdown_row(f"{self.engine}.{stage}", vals) for stage, vals in stages.items() if stage != "_"]
        if self.study is not None:
            rows += self.study.rows(*self.window)
        return rows + epoch_rows(self._rec.rows() if self._rec is not None else [], self._epoch_of)

    def summary_extra(self) -> dict[str, Any]:
        """Keys for rank_timing.extra: synchronisation volume per epoch and time to the loss threshold."""
        extra: dict[str, Any] = dict(self.sync, epochs_started=self.epoch + 1, weights_file=self.weights_file)
        if self.loss_threshold is not None:
            threshold = float(self.loss_threshold)
            hit = None
            if self._losses:
                below = (torch.stack(self._losses).float().cpu() < threshold).nonzero()
                hit = int(below[0, 0]) if len(below) else None
            extra.update(loss_threshold=threshold, first_iter_below_threshold=hit)
        if self.stop_rule is not None:
            extra.update(self.stop_rule.extra(len(self._epoch_of)))
        if self.study is not None:
            extra["study_timing"] = True
        return extra

    def close(self) -> None:
        if isinstance(self.model, HandDataParallel):
            self.model.close()


def build(ctx: DistContext, cfg: dict, plan: dict) -> FrozenBackboneTrainer:
    return FrozenBackboneTrainer(ctx, cfg, plan)
