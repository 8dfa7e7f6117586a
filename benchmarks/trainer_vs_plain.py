"""The campaign's SwinV2 trainer vs a plain PyTorch loop: same model, batch and optimizer, in one run.

- *trainer*: ``trainers.mmseg.trainer`` as a campaign job runs it: MMEngine's Runner
  machinery (optim wrapper, param schedulers, hooks, logger) and the Recorder's
  ``begin``/``mark``/``end`` around every step.
- *plain*: the same EncoderDecoder (same config and seed: same weights), the same
  synthetic batches already on the device, AdamW with the same parameter groups
  (no weight decay on norms, logit scale, cpb_mlp, position tables), autocast to the
  same precision (a GradScaler for fp16): ``zero_grad``, forward, loss, ``backward``,
  ``step`` and nothing else; no runner, no hooks, no instrumentation.

Blocks of ``--steps`` steps alternate A/B, B/A, ... (drift and neighbours' load hit
both alike), each block device-synchronised at both ends; each pair gives a ratio
trainer/plain of block times, printed as their median with a 95% confidence interval:

    trainer/plain step time: 1.012 (median of 10 pairs; 95% CI 0.998-1.020; plain 270.1 ms/step, trainer 273.3 ms/step; ...)
    trainer phases: data 0.1%, forward 31.2%, backward 60.3%, step 8.4% of its step; data wait goal < 1%: met

The goal on a GPU is <= 1.05. On CPU (the micro variant by default) the figure shows
the framework's host-side cost against a step that is all host work.

    .venv/bin/python benchmarks/trainer_vs_plain.py                     # CPU, micro, 128x128, 2 images
    .venv/bin/python benchmarks/trainer_vs_plain.py --device cuda --variant base --image-size 512 --batch 8 --precision bf16
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import command_line, figure, load_average, median_ci, save, save_arg  # noqa: E402

HALF = {"bf16": "bfloat16", "fp16": "float16"}


def _cfg(args) -> tuple[dict, dict]:
    cfg = {
        "trainer": {"name": "swinv2_upernet", "optimizer": "adamw", "lr": 6e-5, "weight_decay": 0.01,
                    "precision": args.precision, "params": {"variant": args.variant}},
        "dataset": {"name": "synthetic", "root": None, "image_size": args.image_size, "channels": 3,
                    "num_classes": 150, "num_workers": 0, "fraction": None, "length": None},
    }
    return cfg, {"batch_per_gpu": args.batch, "iterations": 10**6, "warmup": 0, "seed": 0}


class Plain:
    """The plain loop over the trainer's model config, batches and parameter groups."""

    def __init__(self, trainer, cfg: dict, device, precision: str):
        import torch
        from mmseg.registry import MODELS

        from trainers.mmseg.model import model_config

        torch.manual_seed(0)  # the trainer's seed: the same initial weights
        self.model = MODELS.build(model_config(cfg, device, 1))
        self.model.init_weights()
        self.model.to(device).train()
        names = {id(p): n for n, p in trainer.module.named_parameters()}
        mine = dict(self.model.named_parameters())
        groups = [{"params": [mine[names[id(p)]] for p in g["params"]], "lr": g["lr"],
                   "weight_decay": g["weight_decay"]} for g in trainer.optim_wrapper.optimizer.param_groups]
        betas = trainer.optim_wrapper.optimizer.defaults["betas"]
        self.optimizer = torch.optim.AdamW(groups, lr=groups[0]["lr"], betas=betas)
        self.batches = [data for _, data in trainer._batches]
        cuda = device.type == "cuda"
        self.dtype = getattr(torch, HALF[precision]) if cuda and precision in HALF else None
        self.device_type = device.type
        self.scaler = torch.amp.GradScaler("cuda") if cuda and precision == "fp16" else None
        self._i = 0

    def step(self) -> None:
        import torch

        data = self.batches[self._i % len(self.batches)]
        self._i += 1
        self.optimizer.zero_grad(set_to_none=True)
        with torch.autocast(self.device_type, dtype=self.dtype, enabled=self.dtype is not None):
            losses = self.model(data["inputs"], data["data_samples"], mode="loss")
            loss = sum(v for k, v in losses.items() if "loss" in k)
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            loss.backward()
            self.optimizer.step()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--variant", default="micro", help="SwinV2 variant (micro, tiny, small, base, large)")
    ap.add_argument("--image-size", type=int, default=128, help="crop side (a multiple of 32)")
    ap.add_argument("--batch", type=int, default=2, help="images per step")
    ap.add_argument("--precision", choices=("fp32", "bf16", "fp16"), default="fp32")
    ap.add_argument("--pairs", type=int, default=10, help="A/B pairs of blocks")
    ap.add_argument("--steps", type=int, default=3, help="steps per block")
    ap.add_argument("--warmup", type=int, default=3, help="steps of each before timing (allocator, cuDNN autotuning)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (CPU)")
    save_arg(ap)
    args = ap.parse_args(argv)
    load0 = load_average()

    import torch

    from trainers.dist import DistContext
    from trainers.instrument import Recorder
    from trainers.mmseg import compat

    torch.set_num_threads(args.threads)
    cuda = args.device == "cuda"
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    compat.apply()
    from trainers.mmseg.trainer import SwinV2UperNetTrainer

    ctx = DistContext(rank=0, world_size=1, local_rank=0, local_world_size=1, num_nodes=1, device=device,
                      backend="none", emulated=False, host=socket.gethostname())
    cfg, plan = _cfg(args)
    trainer = SwinV2UperNetTrainer(ctx, cfg, plan)
    plain = Plain(trainer, cfg, device, args.precision)
    total = args.warmup + 2 * args.pairs * args.steps
    rec = Recorder(device, warmup=args.warmup, expected_iterations=total)

    def run_trainer(n: int) -> None:
        for _ in range(n):
            rec.begin()
            loss = trainer.step(rec)
            rec.end(loss, trainer.images_per_step)

    def run_plain(n: int) -> None:
        for _ in range(n):
            plain.step()

    def block(fn, n: int) -> float:
        if cuda:
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        fn(n)
        if cuda:
            torch.cuda.synchronize(device)
        return time.perf_counter() - t0

    block(run_trainer, args.warmup), block(run_plain, args.warmup)
    ratios, plain_s, trainer_s = [], [], []
    for i in range(args.pairs):
        if i % 2 == 0:
            p, t = block(run_plain, args.steps), block(run_trainer, args.steps)
        else:
            t, p = block(run_trainer, args.steps), block(run_plain, args.steps)
        ratios.append(t / p)
        plain_s.append(p / args.steps)
        trainer_s.append(t / args.steps)
    rec.finish()
    rows = [r for r in rec.rows() if not r["warmup"]]
    trainer.close()
    lo, hi = median_ci(ratios)
    med = statistics.median(ratios)
    print(f"trainer/plain step time: {med:.3f} (median of {len(ratios)} pairs; 95% CI {lo:.3f}-{hi:.3f}; "
          f"plain {statistics.median(plain_s) * 1e3:.1f} ms/step, trainer {statistics.median(trainer_s) * 1e3:.1f} "
          f"ms/step; {args.device}, SwinV2-{args.variant} + UPerNet, {args.batch}x{args.image_size}x{args.image_size}, "
          f"{args.precision}; goal on a GPU <= 1.05: {'met' if med <= 1.05 else 'NOT met'})", flush=True)
    iters = sum(r["iter_s"] for r in rows)
    shares = {p: sum(r[f"{p}_s"] or 0.0 for r in rows) / iters for p in ("data", "forward", "backward", "step")}
    print("trainer phases: " + ", ".join(f"{p} {v * 100:.1f}%" for p, v in shares.items())
          + f" of its step; data wait goal < 1%: {'met' if shares['data'] < 0.01 else 'NOT met'}", flush=True)
    if args.save:
        what = f"SwinV2-{args.variant} + UPerNet, {args.batch}x{args.image_size}x{args.image_size}, {args.precision}"
        print("saved:", save(f"trainer_vs_plain-{args.device}", command=command_line("trainer_vs_plain.py", argv),
                             load_start=load0, figures=[
            figure("ratio", f"the SwinV2 trainer / a plain PyTorch loop, step time ({args.device}, {what})",
                   ratios, unit="x", goal="<= 1.05 on a GPU", met=med <= 1.05 if cuda else None,
                   note=f"median's 95% CI {lo:.3f}-{hi:.3f}"),
            figure("data_wait", "the trainer's data wait, share of its step", [100 * shares["data"]], unit="%",
                   goal="< 1 %", met=shares["data"] < 0.01),
        ]), flush=True)


if __name__ == "__main__":
    main()
