"""What the measurements cost: instrumented vs bare step time, in one run.

Each rank holds two copies of the synthetic trainer (same seed: same weights, same
batches, both DDP over the same process group). The *instrumented* one runs as a
campaign job does in its timed window: ``Recorder.begin/mark/end`` around every step
and the all-reduce timed by trainers.comm's DDP hook. The *bare* one runs the same
zero_grad/forward/backward/step with neither. Blocks of ``--steps`` steps alternate
A/B, B/A, ... (so drift and neighbours' load hit both alike); each pair gives a
ratio instrumented/bare of block times (wall clock, and the rank process's CPU
time, which other processes on a shared machine disturb less), and rank 0 prints
their medians with a 95% confidence interval:

    instrumented/bare step time: 1.004 (median of 20 pairs; 95% CI 0.991-1.012; bare 9.81 ms/step; ...)

On a shared 2-core machine that ratio is only good to a few percent (see its
interval), too coarse for a 1 % budget. So rank 0 also *accounts* for the cost,
each part measured on its own where little else moves, after the A/B blocks while
the other ranks wait:

    accounted: 30.1 us/step = 0.20% of the bare step (Recorder 3.1 us/step + hook 27.0 us/bucket x 1 bucket(s)/step; ...)

- Recorder: ``begin``, four ``mark``s and ``end`` in a loop with nothing else.
- hook: a one-layer DDP model over a one-rank group of the same backend, timed by
  trainers.comm's hook vs DDP's builtin all-reduce, in alternating blocks: the
  median of the paired differences, per bucket (its 95% interval is printed).

FLOP counting (one warm-up iteration) and the profiler window (after the timed
window) are not part of a timed step, so they are in neither figure.

    .venv/bin/python benchmarks/overhead.py                     # 2 CPU ranks, gloo
    .venv/bin/python benchmarks/overhead.py --device cuda --ranks 1
"""

from __future__ import annotations

import argparse
import math
import os
import socket
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _config(args) -> tuple[dict, dict]:
    cfg = {
        "dataset": {"channels": 3, "num_classes": 10, "image_size": args.image_size},
        "trainer": {"optimizer": "sgd", "lr": 0.01, "momentum": 0.9, "weight_decay": 0.0,
                    "params": {"width": args.width, "depth": args.depth}},
    }
    return cfg, {"seed": 0, "batch_per_gpu": args.batch}


def median_ci(values: list[float]) -> tuple[float, float]:
    """Distribution-free ~95% confidence interval of the median (order statistics
    n/2 -+ 1.96 sqrt(n)/2): how far the noise of this machine leaves the figure open."""
    xs = sorted(values)
    n = len(xs)
    half = 1.96 * math.sqrt(n) / 2
    return xs[max(int(math.floor(n / 2 - half)), 0)], xs[min(int(math.ceil(n / 2 + half)), n - 1)]


class _NullRecorder:
    """Recorder calls that do nothing (--no-recorder: the hook's cost alone)."""

    def begin(self): pass  # noqa: E704
    def mark(self, phase): pass  # noqa: E704
    def end(self, loss=None, images=0): pass  # noqa: E704
    def finish(self): pass  # noqa: E704
    def rows(self): return []  # noqa: E704

    def comm_span(self, nbytes):
        return [None, None, nbytes]

    def stamp(self):
        return None


def recorder_cost_s(device, loops: int = 5, n: int = 5000) -> float:
    """Seconds one timed step spends in Recorder calls (begin, 4 marks, end): median of ``loops``."""
    import torch

    from trainers.instrument import Recorder

    loss = torch.zeros((), device=device)
    out = []
    for _ in range(loops):
        rec = Recorder(device, warmup=0, expected_iterations=n)  # as a job makes it: its events pooled ahead
        t0 = time.perf_counter()
        for _ in range(n):
            rec.begin()
            rec.mark("data"), rec.mark("forward"), rec.mark("backward"), rec.mark("step")
            rec.end(loss, 8)
        out.append((time.perf_counter() - t0) / n)
    return statistics.median(out)


def hook_cost_s(group, device, pairs: int = 20, n: int = 200) -> tuple[float, float, float]:
    """(median, CI low, CI high) seconds the timing hook adds to one bucket's all-reduce
    vs DDP's builtin one: a one-layer model, DDP over ``group`` (one rank), blocks of
    ``n`` steps alternating hooked/builtin."""
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    from trainers.comm import AllReduceTimer
    from trainers.instrument import Recorder

    cuda = device.type == "cuda"
    ids = [device] if cuda else None
    torch.manual_seed(0)
    builtin = DDP(torch.nn.Linear(16, 4).to(device), device_ids=ids, process_group=group)
    hooked = DDP(torch.nn.Linear(16, 4).to(device), device_ids=ids, process_group=group)
    rec = Recorder(device, warmup=0)
    hooked.register_comm_hook(group, AllReduceTimer(rec).hook)
    x = torch.randn(8, 16, device=device)

    def block(model) -> float:
        if cuda:
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        for _ in range(n):  # no rec.begin(): the spans are stamped, not kept (its cost is the Recorder's)
            model(x).sum().backward()
        if cuda:
            torch.cuda.synchronize(device)
        return (time.perf_counter() - t0) / n

    block(builtin), block(hooked)  # warm-up
    diffs = []
    for i in range(pairs):
        if i % 2 == 0:
            b, h = block(builtin), block(hooked)
        else:
            h, b = block(hooked), block(builtin)
        diffs.append(h - b)
    lo, hi = median_ci(diffs)
    return statistics.median(diffs), lo, hi


def _rank(rank: int, args) -> None:
    import torch
    import torch.distributed as dist

    from trainers import comm
    from trainers.dist import DistContext
    from trainers.instrument import Recorder
    from trainers.synthetic import SyntheticTrainer

    torch.set_num_threads(args.threads)
    cuda = args.device == "cuda"
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    backend = "none"
    if args.ranks > 1:
        backend = "nccl" if cuda else "gloo"
        dist.init_process_group(backend, rank=rank, world_size=args.ranks)
    ctx = DistContext(rank=rank, world_size=args.ranks, local_rank=rank, local_world_size=args.ranks, num_nodes=1,
                      device=device, backend=backend, emulated=False, host=socket.gethostname())
    cfg, plan = _config(args)
    instrumented, bare = SyntheticTrainer(ctx, cfg, plan), SyntheticTrainer(ctx, cfg, plan)
    rec = (Recorder(device, warmup=0, expected_iterations=(2 * args.pairs + 1) * args.steps)
           if not args.no_recorder else _NullRecorder())
    if not args.no_hook:
        comm.attach(instrumented, rec)

    def run_instrumented(n: int) -> None:
        for _ in range(n):
            rec.begin()
            loss = instrumented.step(rec)
            rec.end(loss, instrumented.images_per_step)

    def run_bare(n: int) -> None:
        t = bare
        for _ in range(n):
            x, y = t.pool[t._i % len(t.pool)]
            t._i += 1
            t.optimizer.zero_grad(set_to_none=True)
            loss = t.loss_fn(t.model(x), y)
            loss.backward()
            t.optimizer.step()

    def block(fn) -> tuple[float, float]:
        """Wall and process CPU seconds (all the rank's threads) of ``args.steps`` steps."""
        if cuda:
            torch.cuda.synchronize(device)
        if backend != "none":
            dist.barrier()  # both ranks start the block together
        t0, c0 = time.perf_counter(), time.process_time()
        fn(args.steps)
        if cuda:
            torch.cuda.synchronize(device)
        return time.perf_counter() - t0, time.process_time() - c0

    block(run_bare), block(run_instrumented)  # warm-up: allocator, DDP bucket rebuild
    ratios, cpu_ratios, bare_s = [], [], []
    for i in range(args.pairs):
        if i % 2 == 0:
            b, a = block(run_bare), block(run_instrumented)
        else:
            a, b = block(run_instrumented), block(run_bare)
        ratios.append(a[0] / b[0])
        cpu_ratios.append(a[1] / b[1] if b[1] > 0 else float("nan"))
        bare_s.append(b[0])
    rec.finish()
    rec.rows()  # resolve what was recorded (after the window in a real job)
    if args.no_hook:
        buckets = 0
    elif args.no_recorder:  # the hook ran, but nothing kept its spans: count one bucket
        buckets = 1
    else:
        buckets = statistics.median([a["buckets"] for a in rec.allreduce_rows()] or [0])
    # Accounting (module docstring): rank 0 alone, the other ranks wait at the barrier.
    group = dist.new_group([0]) if backend != "none" else None
    if rank == 0:
        rec_s = recorder_cost_s(device) if not args.no_recorder else 0.0
        hook_s, hook_lo, hook_hi = hook_cost_s(group, device) if buckets and group is not None else (0.0, 0.0, 0.0)
    if backend != "none":
        dist.barrier()
    if rank == 0:
        lo, hi = median_ci(ratios)
        print(f"instrumented/bare step time: {statistics.median(ratios):.3f} (median of {len(ratios)} pairs; "
              f"95% CI {lo:.3f}-{hi:.3f}; bare {statistics.median(bare_s) / args.steps * 1e3:.2f} ms/step; "
              f"{args.ranks} rank(s) on {args.device}, width {args.width}, depth {args.depth}, "
              f"{args.batch}x{args.image_size}x{args.image_size} images/rank)", flush=True)
        lo, hi = median_ci(cpu_ratios)
        print(f"instrumented/bare CPU time:  {statistics.median(cpu_ratios):.3f} (median of {len(cpu_ratios)} pairs; "
              f"95% CI {lo:.3f}-{hi:.3f}; the rank process's CPU seconds: less sensitive to other load)", flush=True)
        step_s = statistics.median(bare_s) / args.steps
        cost = rec_s + hook_s * buckets
        print(f"accounted: {cost * 1e6:.1f} us/step = {cost / step_s * 100:.2f}% of the bare step "
              f"(Recorder {rec_s * 1e6:.1f} us/step + hook {hook_s * 1e6:.1f} us/bucket "
              f"[95% CI {hook_lo * 1e6:.1f}-{hook_hi * 1e6:.1f}] x {buckets:g} bucket(s)/step; "
              f"budget 1%: {'met' if cost <= 0.01 * step_s else 'NOT met'})", flush=True)
    if backend != "none":
        dist.destroy_process_group()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=2, help="DDP ranks (processes); 1: no all-reduce")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--pairs", type=int, default=150, help="A/B pairs of blocks")
    ap.add_argument("--steps", type=int, default=2, help="steps per block")
    ap.add_argument("--width", type=int, default=32, help="synthetic trainer: channels of the first conv")
    ap.add_argument("--depth", type=int, default=3, help="synthetic trainer: conv blocks")
    ap.add_argument("--image-size", type=int, default=32)
    ap.add_argument("--batch", type=int, default=8, help="images per rank per step")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    ap.add_argument("--no-hook", action="store_true", help="instrumented without the all-reduce hook (Recorder only)")
    ap.add_argument("--no-recorder", action="store_true", help="instrumented without the Recorder (hook only)")
    args = ap.parse_args(argv)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    if args.ranks == 1:
        _rank(0, args)
    else:
        import torch.multiprocessing as mp

        mp.spawn(_rank, args=(args,), nprocs=args.ranks)


if __name__ == "__main__":
    main()
