"""The ViT study: ViT-B/16 (timm ``vit_base_patch16_224``, never downloaded; optional
local weights) or a tiny ViT for tests, trained on CIFAR-10/100, an ImageFolder or
synthetic images resized to the model's input, by DDP or DeepSpeed.

One iteration is one optimizer step of ``plan["grad_accum"]`` micro-batches of
``batch_per_gpu`` images each (DDP: ``no_sync()`` on all but the last; DeepSpeed: its
own accumulation). The loader runs epoch after epoch over this rank's shard; each
epoch's time (the first one, warm-up included, apart) and training accuracy are
reported as ``epoch_<i>`` breakdown rows and in ``summary_extra()``. With
``experiment.validation=true`` the test split is evaluated after every epoch, outside the
timed window (trainers/evaluate.py: the ``evaluation`` table).

Trainer params: model (``vit_base_patch16_224`` | ``vit_tiny``), image_size (default:
the model's), weights (a local state-dict file), engine (ddp | deepspeed), zero_stage
(DeepSpeed ZeRO stage, default 0). ``trainer.precision`` picks fp32/fp16/bf16. With
DeepSpeed, its gradient reduction is timed as DDP's all-reduce is and its own timers
become ``deepspeed.<timer>`` breakdown rows (timed window only): trainers/ds_engine.py.

Weak scaling by dataset share: ``experiment.dataset_fraction_per_gpu`` f makes every
point train on min(1, f x gpus) of the training set (overriding ``dataset.fraction``).
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Optional

import torch
from torch import nn

from trainers.data import EpochBatches, build_dataset, build_loader, dataset_fraction
from trainers.dist import DistContext
from trainers.evaluate import build_evaluator
from trainers.instrument import Recorder
from trainers.optim import build_optimizer
from trainers.parallel import breakdown_row
from trainers.registry import engine_of
from trainers.specs.vit import TRAINER

MODELS = ("vit_base_patch16_224", "vit_tiny")
ENGINES = TRAINER.engines  # declared once, in trainers/specs/vit.py
# The tiny ViT of the tests: 32x32 images, 8x8 patches, 2 blocks of width 32.
TINY = dict(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2, mlp_ratio=2.0)


def build_vit(name: str, *, num_classes: int, image_size: Optional[int] = None, weights: Optional[str] = None,
              weights_sha256: Optional[str] = None) -> nn.Module:
    """A randomly initialised ViT (``weights``: a local state dict, read through the door and
    checked against ``weights_sha256``, the launch's record; a head of another class count
    is skipped, the rest must match)."""
    import timm
    from timm.models.vision_transformer import VisionTransformer

    if name not in MODELS:
        raise ValueError(f"unknown ViT {name!r}; available: {', '.join(MODELS)}")
    if name == "vit_tiny":
        model = VisionTransformer(**dict(TINY, img_size=image_size or TINY["img_size"]), num_classes=num_classes)
    else:
        kwargs = {"img_size": image_size} if image_size else {}
        model = timm.create_model(name, pretrained=False, num_classes=num_classes, **kwargs)
    if weights:
        from trainers.state_file import load_state

        state = load_state(weights, weights_sha256)
        for key in ("state_dict", "model"):
            if isinstance(state, dict) and isinstance(state.get(key), dict):
                state = state[key]
        own = model.state_dict()
        state = {k: v for k, v in state.items() if not (k.startswith("head.") and k in own and v.shape != own[k].shape)}
        missing, unexpected = model.load_state_dict(state, strict=False)
        bad = [k for k in list(missing) + list(unexpected) if not k.startswith("head.")]
        if bad:
            raise ValueError(f"{weights}: not {name} weights ({len(bad)} keys do not match, e.g. {bad[0]!r})")
    return model


def model_input_size(name: str, image_size: Optional[int]) -> int:
    return int(image_size) if image_size else (TINY["img_size"] if name == "vit_tiny" else 224)


def _own_process_group(ctx: DistContext) -> bool:
    """DeepSpeed needs torch.distributed even with one rank: start a 1-rank group
    (on a port free now; the environment is left alone)."""
    import socket

    import torch.distributed as dist

    if dist.is_initialized():
        return False
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("nccl" if ctx.device.type == "cuda" else "gloo",
                            init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    return True


class ViTTrainer:
    def __init__(self, ctx: DistContext, cfg: dict, plan: dict):
        data, tcfg = cfg["dataset"], cfg["trainer"]
        p = tcfg.get("params") or {}
        self.ctx = ctx
        self.engine = engine_of(p, ENGINES)
        self.precision = str(tcfg.get("precision") or "fp32")
        self.accum = max(1, int(plan.get("grad_accum", 1)))
        name = str(p.get("model") or "vit_base_patch16_224")
        size = model_input_size(name, p.get("image_size"))
        num_classes = int(data.get("num_classes") or 10)
        torch.manual_seed(plan["seed"])  # same initial weights on every rank
        model = build_vit(name, num_classes=num_classes, image_size=size, weights=p.get("weights") or None,
                          weights_sha256=p.get("weights_sha256") or None)
        model = model.to(ctx.device)
        self.trainable_params = sum(q.numel() for q in model.parameters() if q.requires_grad)
        self.loss_fn = nn.CrossEntropyLoss()
        self._own_pg = False
        self.ds = None
        self.ds_comm = None  # trainers.ds_engine.DeepSpeedComm with engine=deepspeed
        optimizer = build_optimizer(model, tcfg)
        b = plan["batch_per_gpu"]
        if self.engine == "deepspeed":
            import deepspeed

            from trainers.ds_engine import DeepSpeedComm

            self._own_pg = _own_process_group(ctx)
            for key, value in (("RANK", ctx.rank), ("LOCAL_RANK", ctx.local_rank), ("WORLD_SIZE", ctx.world_size)):
                os.environ.setdefault(key, str(value))  # what DeepSpeed reads (submitit sets SLURM_*/its own)
            deepspeed.init_distributed(dist_backend="nccl" if ctx.device.type == "cuda" else "gloo")
            self.zero_stage = int(p.get("zero_stage", 0))
            config = {
                "train_micro_batch_size_per_gpu": b,
                "gradient_accumulation_steps": self.accum,
                "train_batch_size": b * self.accum * ctx.world_size,
                "zero_optimization": {"stage": self.zero_stage},
                "fp16": {"enabled": self.precision == "fp16"},
                "bf16": {"enabled": self.precision == "bf16"},
                "wall_clock_breakdown": True,
                "steps_per_print": 2**31 - 1,  # no progress lines; the timers are read after every step
            }
            self.ds, optimizer, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
            model = self.ds
            self.ds_comm = DeepSpeedComm(self.ds, ctx.world_size)
        elif ctx.distributed:
            # The job attaches its all-reduce timer (trainers.comm) to this DDP module.
            model = nn.parallel.DistributedDataParallel(model, device_ids=[ctx.device] if ctx.device.type == "cuda" else None)
        self.model = model
        self.optimizer = optimizer
        cuda = ctx.device.type == "cuda"
        self.autocast_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(self.precision)
        self.scaler = torch.amp.GradScaler("cuda", enabled=cuda and self.precision == "fp16" and self.ds is None)

        self.fraction = dataset_fraction(cfg, ctx.world_size)
        spec = dict(data, fraction=self.fraction)
        dataset = build_dataset(spec, train=True, image_size=size, channels=3, seed=plan["seed"])
        self.dataset_size = len(dataset)
        self.loader = build_loader(dataset, batch_size=b, rank=ctx.rank, world_size=ctx.world_size,
                                   seed=plan["seed"], num_workers=int(data.get("num_workers") or 0))
        self.images_per_step = b * self.accum
        self.batches = EpochBatches(self.loader)
        # experiment.validation: the test split after every epoch, outside the timed window
        self.evaluator = build_evaluator(
            ctx, cfg, module=self.ds.module if self.ds is not None else getattr(model, "module", model),
            batches=self.batches, image_size=size, batch_size=b, ranks=ctx.world_size, rank=ctx.rank,
            device=ctx.device, seed=plan["seed"], dtype=self.autocast_dtype if self.ds is not None else None)
        self.window = (plan["warmup"], plan["warmup"] + plan["iterations"])
        self._rec: Optional[Recorder] = None
        self._epoch_of: list[int] = []  # epoch of each iteration (its last micro-batch)
        self._correct: dict[int, torch.Tensor] = {}
        self._seen: dict[int, int] = {}

    @property
    def epoch(self) -> int:
        return self.batches.epoch

    def _next(self) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = self.batches.next()
        return x.to(self.ctx.device, non_blocking=True), y.to(self.ctx.device, non_blocking=True)

    def _autocast(self):
        if self.autocast_dtype is None or self.ds is not None:  # DeepSpeed casts the model itself
            return contextlib.nullcontext()
        return torch.autocast(self.ctx.device.type, dtype=self.autocast_dtype)

    def _count(self, out: torch.Tensor, y: torch.Tensor) -> None:
        hits = (out.detach().argmax(1) == y).sum()
        self._correct[self.epoch] = self._correct.get(self.epoch, 0) + hits
        self._seen[self.epoch] = self._seen.get(self.epoch, 0) + len(y)

    def step(self, rec: Recorder) -> torch.Tensor:
        if self._rec is None:
            self._rec = rec  # the timed window's Recorder (the profiler window brings another)
        if self.ds_comm is not None:
            self.ds_comm.begin(rec)
        total = None
        for k in range(self.accum):
            x, y = self._next()
            if self.ds is not None and self.autocast_dtype is not None:
                x = x.to(self.autocast_dtype)
            rec.mark("data")
            last = k == self.accum - 1
            if self.ds is None and k == 0:
                self.optimizer.zero_grad(set_to_none=True)
            ddp = isinstance(self.model, nn.parallel.DistributedDataParallel)
            sync = self.model.no_sync() if (ddp and not last) else contextlib.nullcontext()
            with sync:
                with self._autocast():
                    out = self.model(x)
                    loss = self.loss_fn(out.float(), y)
                if rec is self._rec:  # the timed run's epochs only, as their epoch_<i> rows (not the profiler's)
                    self._count(out, y)
                rec.mark("forward")
                if self.ds is not None:
                    self.ds.backward(loss)  # its gradient reduction is a comm span inside (ds_engine)
                    rec.mark("backward")
                    self.ds.step()  # steps the optimizer on the last micro-batch only
                    if last:
                        self.ds_comm.read_timers()
                    rec.mark("step")
                else:
                    self.scaler.scale(loss / self.accum).backward()
                    rec.mark("backward")
            total = loss.detach() if total is None else total + loss.detach()
        if self.ds is None:
            rec.mark("comm")  # DDP all-reduced during the last backward: the job's hook timed it
            self.scaler.step(self.optimizer)
            self.scaler.update()
            rec.mark("step")
        self._epoch_of.append(self.epoch)
        return total / self.accum

    # ---------------------------------------------------------------- results
    def _epochs(self) -> list[dict[str, Any]]:
        rows = self._rec.rows() if self._rec is not None else []
        out: dict[int, dict[str, Any]] = {}
        for r in rows:
            e = self._epoch_of[r["iter"]]
            d = out.setdefault(e, {"epoch": e, "iterations": 0, "seconds": 0.0, "iter_s": []})
            d["iterations"] += 1
            d["seconds"] += r["iter_s"]
            d["iter_s"].append(r["iter_s"])
        for e, d in out.items():
            seen = self._seen.get(e, 0)
            d["train_accuracy"] = float(self._correct[e]) / seen if seen else None
        return [out[e] for e in sorted(out)]

    def breakdown_rows(self) -> list[dict]:
        """``epoch_<i>`` (every iteration of the timed window's Recorder, warm-up in epoch 0)
        and, with DeepSpeed, ``deepspeed.<timer>`` over the timed iterations."""
        rows = [breakdown_row(f"epoch_{d['epoch']}", d["iter_s"]) for d in self._epochs()]
        if self.ds_comm is not None:
            rows += self.ds_comm.breakdown_rows(*self.window)
        return rows

    def summary_extra(self) -> dict[str, Any]:
        """Keys for rank_timing.extra: engine settings, dataset share, per-epoch time and accuracy."""
        epochs = [{k: v for k, v in d.items() if k != "iter_s"} for d in self._epochs()]
        extra: dict[str, Any] = {"engine": self.engine, "precision": self.precision, "grad_accum": self.accum,
                                 "dataset_fraction": self.fraction, "dataset_size": self.dataset_size,
                                 "epochs": epochs}
        if self.ds is not None:
            extra["zero_stage"] = self.zero_stage
            extra.update(self.ds_comm.extra())
        return extra

    def close(self) -> None:
        if self._own_pg:
            import torch.distributed as dist

            dist.destroy_process_group()


def build(ctx: DistContext, cfg: dict, plan: dict) -> ViTTrainer:
    return ViTTrainer(ctx, cfg, plan)
