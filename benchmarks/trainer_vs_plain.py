"""The campaign's SwinV2 trainer vs a plain PyTorch loop: same model, batch and optimizer, in one run.

- *trainer*: ``trainers.mmseg.trainer`` as a campaign job runs it: MMEngine's Runner
  machinery (optim wrapper, param schedulers, hooks, logger) and the Recorder's
  ``begin``/``mark``/``end`` around every step; its lean loop (the default,
  ``trainer.params.loop=lean``) and, with ``--loops lean,stock``, its stock loop too
  (MMEngine's own ``run_iter`` as MMSegmentation configures it: trainers/mmseg/trainer.py).
- *plain*: the same EncoderDecoder (same config and seed: same weights), the same
  synthetic batches already on the device, AdamW with the same parameter groups
  (no weight decay on norms, logit scale, cpb_mlp, position tables), autocast to the
  same precision (a GradScaler for fp16): ``zero_grad``, forward, loss, ``backward``,
  ``step`` and nothing else; no runner, no hooks, no instrumentation.

Blocks of ``--steps`` steps alternate A/B, B/A, ... (drift and neighbours' load hit
both alike; with both loops plain/lean/stock, then stock/lean/plain), each block
device-synchronised at both ends; each pair gives a ratio loop/plain of block times,
printed as their median with a 95% confidence interval (the lean loop's line first,
as ever, then the stock loop's):

    trainer/plain step time: 1.012 (median of 10 pairs; 95% CI 0.998-1.020; plain 270.1 ms/step, trainer 273.3 ms/step; ...)
    trainer phases: data 0.1%, forward 31.2%, backward 60.3%, step 8.4% of its step; data wait goal < 1%: met
    stock/plain step time: 1.310 (median of 10 pairs; 95% CI ...; plain 270.1 ms/step, stock 353.8 ms/step; ...; no goal)
    stock phases: data 0.5%, step 99.5% of its step (run_iter: forward, backward and update in one phase)

The goal on a GPU is <= 1.05. On CPU (the micro variant by default) the figure shows
the framework's host-side cost against a step that is all host work.

    .venv/bin/python benchmarks/trainer_vs_plain.py                     # CPU, micro, 128x128, 2 images
    .venv/bin/python benchmarks/trainer_vs_plain.py --device cuda --variant base --image-size 512 --batch 8 --precision bf16
    .venv/bin/python benchmarks/trainer_vs_plain.py --loops lean,stock   # both loops against the same plain one
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
LOOPS = ("lean", "stock")  # trainer.params.loop values


def _loops(text: str) -> list[str]:
    loops = [x.strip() for x in text.split(",") if x.strip()]
    bad = [x for x in loops if x not in LOOPS]
    if bad or not loops or len(set(loops)) != len(loops):
        raise argparse.ArgumentTypeError(f"--loops takes distinct values of {', '.join(LOOPS)}, got '{text}'")
    return loops


def _cfg(args, loop: str = "lean") -> tuple[dict, dict]:
    cfg = {
        "trainer": {"name": "swinv2_upernet", "optimizer": "adamw", "lr": 6e-5, "weight_decay": 0.01,
                    "precision": args.precision, "params": {"variant": args.variant, "loop": loop}},
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
    ap.add_argument("--loops", type=_loops, default=["lean"],
                    help="trainer.params.loop values to time against the plain loop, comma-separated (lean,stock)")
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
    plan = _cfg(args)[1]
    trainers = {loop: SwinV2UperNetTrainer(ctx, _cfg(args, loop)[0], plan) for loop in args.loops}
    # the plain loop takes the lean trainer's pre-made batches and merged groups (one made for it if not timed)
    lean = trainers.get("lean") or SwinV2UperNetTrainer(ctx, _cfg(args)[0], plan)
    plain = Plain(lean, _cfg(args)[0], device, args.precision)
    if "lean" not in trainers:
        lean.close()
    total = args.warmup + 2 * args.pairs * args.steps
    recs = {loop: Recorder(device, warmup=args.warmup, expected_iterations=total) for loop in trainers}

    def runner(loop: str):
        trainer, rec = trainers[loop], recs[loop]

        def run(n: int) -> None:
            for _ in range(n):
                rec.begin()
                loss = trainer.step(rec)
                rec.end(loss, trainer.images_per_step)
        return run

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

    arms = {"plain": run_plain, **{loop: runner(loop) for loop in trainers}}
    for fn in arms.values():
        block(fn, args.warmup)
    ratios: dict[str, list[float]] = {loop: [] for loop in trainers}
    per_step: dict[str, list[float]] = {arm: [] for arm in arms}
    for i in range(args.pairs):
        order = list(arms) if i % 2 == 0 else list(reversed(arms))  # plain first, then last
        took = {arm: block(arms[arm], args.steps) for arm in order}
        for arm, t in took.items():
            per_step[arm].append(t / args.steps)
        for loop in trainers:
            ratios[loop].append(took[loop] / took["plain"])
    rows = {}
    for loop, trainer in trainers.items():
        recs[loop].finish()
        rows[loop] = [r for r in recs[loop].rows() if not r["warmup"]]
        trainer.close()
    what = f"SwinV2-{args.variant} + UPerNet, {args.batch}x{args.image_size}x{args.image_size}, {args.precision}"
    figures = []
    for loop in trainers:
        name = "trainer" if loop == "lean" else loop  # the lean line keeps its words (benchmarks/report.py, docs)
        lo, hi = median_ci(ratios[loop])
        med = statistics.median(ratios[loop])
        print(f"{name}/plain step time: {med:.3f} (median of {len(ratios[loop])} pairs; 95% CI {lo:.3f}-{hi:.3f}; "
              f"plain {statistics.median(per_step['plain']) * 1e3:.1f} ms/step, {name} "
              f"{statistics.median(per_step[loop]) * 1e3:.1f} ms/step; {args.device}, {what}; "
              + (f"goal on a GPU <= 1.05: {'met' if med <= 1.05 else 'NOT met'})" if loop == "lean"
                 else "MMEngine's own loop: no goal)"), flush=True)
        iters = sum(r["iter_s"] for r in rows[loop])
        marked = [p for p in ("data", "forward", "backward", "step") if any(r[f"{p}_s"] is not None for r in rows[loop])]
        shares = {p: sum(r[f"{p}_s"] or 0.0 for r in rows[loop]) / iters for p in marked}
        phases = ", ".join(f"{p} {v * 100:.1f}%" for p, v in shares.items())
        if loop == "lean":
            print(f"trainer phases: {phases} of its step; data wait goal < 1%: "
                  f"{'met' if shares['data'] < 0.01 else 'NOT met'}", flush=True)
            figures += [
                figure("ratio", f"the SwinV2 trainer / a plain PyTorch loop, step time ({args.device}, {what})",
                       ratios[loop], unit="x", goal="<= 1.05 on a GPU", met=med <= 1.05 if cuda else None,
                       note=f"median's 95% CI {lo:.3f}-{hi:.3f}"),
                figure("data_wait", "the trainer's data wait, share of its step", [100 * shares["data"]], unit="%",
                       goal="< 1 %", met=shares["data"] < 0.01),
            ]
        else:
            print(f"stock phases: {phases} of its step (run_iter: forward, backward and update in one phase)",
                  flush=True)
            figures.append(figure(
                "ratio_stock", f"the SwinV2 trainer's stock loop (MMEngine's run_iter, trainer.params.loop=stock) / "
                f"a plain PyTorch loop, step time ({args.device}, {what})", ratios[loop], unit="x",
                note=f"median's 95% CI {lo:.3f}-{hi:.3f}; what MMEngine's own loop costs, no goal"))
    if args.save:
        print("saved:", save(f"trainer_vs_plain-{args.device}", command=command_line("trainer_vs_plain.py", argv),
                             load_start=load0, figures=figures), flush=True)


if __name__ == "__main__":
    main()
