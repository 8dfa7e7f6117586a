"""The synthetic trainer: a real DDP training loop over a small conv net and seeded
random images, so the whole path runs without the MMSegmentation stack.

Params (``trainer.params``): ``width``, ``depth`` (the model) and two test-only
known-answer knobs, recorded in rank_timing.extra when set: ``inject_data_delay_s``
(every iteration waits that long for its batch: the ``data`` phase) and
``inject_comm_delay_s`` (the last gradient bucket's all-reduce of every iteration
completes that much later: ``comm``, ``comm_exposed`` and ``backward``; CPU clocks,
see trainers/comm.py). Its nominal epoch is ``dataset.length`` images (10,000).
"""

from __future__ import annotations

import time

import torch
from torch import nn

from trainers.dist import DistContext
from trainers.instrument import Recorder
from trainers.optim import build_optimizer

POOL_BATCHES = 8  # distinct batches cycled through (generated once, before timing)


def make_model(channels: int, num_classes: int, width: int, depth: int) -> nn.Module:
    layers: list[nn.Module] = []
    c = channels
    for i in range(depth):
        out = width * (2**i)
        layers += [nn.Conv2d(c, out, 3, padding=1, bias=False), nn.BatchNorm2d(out), nn.ReLU(inplace=True)]
        if i < depth - 1:
            layers.append(nn.MaxPool2d(2))
        c = out
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, num_classes)]
    return nn.Sequential(*layers)


class SyntheticTrainer:
    def __init__(self, ctx: DistContext, cfg: dict, plan: dict):
        data, tcfg = cfg["dataset"], cfg["trainer"]
        params = tcfg.get("params") or {}
        torch.manual_seed(plan["seed"])  # same initial weights on every rank
        model = make_model(data["channels"], data["num_classes"], int(params.get("width", 32)), int(params.get("depth", 3)))
        model = model.to(ctx.device)
        self.trainable_params = sum(p.numel() for p in model.parameters() if p.requires_grad)
        if ctx.distributed:
            model = nn.parallel.DistributedDataParallel(model, device_ids=[ctx.device] if ctx.device.type == "cuda" else None)
        self.model = model
        self.optimizer = build_optimizer(model, tcfg)
        self.loss_fn = nn.CrossEntropyLoss()
        b, size = plan["batch_per_gpu"], data["image_size"]
        g = torch.Generator().manual_seed(plan["seed"] * 1000 + ctx.rank)
        self.pool = [
            (
                torch.randn(b, data["channels"], size, size, generator=g).to(ctx.device),
                torch.randint(0, data["num_classes"], (b,), generator=g).to(ctx.device),
            )
            for _ in range(POOL_BATCHES)
        ]
        self.images_per_step = b
        self.dataset_size = int(data.get("length") or 10_000)
        self.inject_data_delay_s = float(params.get("inject_data_delay_s") or 0.0)
        self.inject_comm_delay_s = float(params.get("inject_comm_delay_s") or 0.0)
        self._i = 0

    def resume_at(self, iteration: int) -> None:
        """Continue a checkpointed run at ``iteration`` (its data position: the pool's batch)."""
        self._i = int(iteration)

    def step(self, rec: Recorder) -> torch.Tensor:
        x, y = self.pool[self._i % len(self.pool)]
        self._i += 1
        if self.inject_data_delay_s:
            time.sleep(self.inject_data_delay_s)
        rec.mark("data")
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.loss_fn(self.model(x), y)
        rec.mark("forward")
        loss.backward()
        rec.mark("backward")
        self.optimizer.step()
        rec.mark("step")
        return loss


def build(ctx: DistContext, cfg: dict, plan: dict) -> SyntheticTrainer:
    return SyntheticTrainer(ctx, cfg, plan)
