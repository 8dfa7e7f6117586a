"""The parts of benchmarks/overhead.py that stand apart from its A/B loop: the model's
config, the Recorder that does nothing, the accounted costs (the Recorder's calls alone,
a hook over DDP's builtin all-reduce on a one-layer model), the plain DDP step, the
--step-ms calibration, the per-set figures of the A/B and what its line says of its interval."""

from __future__ import annotations

import statistics
import time

if __package__ in (None, ""):  # imported by benchmarks/overhead.py run as a file
    from _common import trimmed_mean_ci
else:
    from benchmarks._common import trimmed_mean_ci


def config(args) -> tuple[dict, dict]:
    """The synthetic trainer's config and plan for the model ``args`` names (width, depth,
    image size, batch)."""
    cfg = {
        "dataset": {"channels": 3, "num_classes": 10, "image_size": args.image_size},
        "trainer": {"optimizer": "sgd", "lr": 0.01, "momentum": 0.9, "weight_decay": 0.0,
                    "params": {"width": args.width, "depth": args.depth}},
    }
    return cfg, {"seed": 0, "batch_per_gpu": args.batch}


class NullRecorder:
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

    def take_spans(self):  # the C++ hook's log, drained by nobody here (its growth is the hook's only trace)
        pass


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


def passthrough_hook():
    """The least a Python DDP comm hook can do: the timing hook's own mean of the bucket
    (trainers.comm.AllReduceTimer: the backend's average on CPU, divide then sum on CUDA),
    waited for, answered with its one completed future per bucket buffer; no clock read,
    nothing kept. What it costs over DDP's builtin C++ all-reduce is the price of any Python
    hook (DDP calls it with the GIL, wraps the bucket, parses its answer), which campaign's
    timing pays too."""
    from trainers.comm import AllReduceTimer

    timer = AllReduceTimer(None)  # its reduction and its future, never its recorder

    def hook(process_group, bucket):
        t = bucket.buffer()
        timer._allreduce_mean(process_group, t).wait()
        return timer._completed(t, t.nbytes)

    return hook


def hook_cost_s(group, device, pairs: int = 80, n: int = 100, *, passthrough: bool = False,
                cpp: bool = False) -> tuple[float, float, float]:
    """(estimate, CI low, CI high) seconds the timing hook (``cpp``: the C++ one of
    trainers.comm_cpp; ``passthrough``: a Python hook that times nothing, passthrough_hook)
    adds to one bucket's all-reduce vs DDP's builtin one: a one-layer model, DDP over
    ``group`` (every rank calls it), blocks of ``n`` steps alternating hooked/builtin."""
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
    take = None
    if cpp and not passthrough:
        from trainers import comm_cpp

        take = comm_cpp.attach(hooked, rec).log.drain  # what Recorder.begin calls once a step
    else:
        hooked.register_comm_hook(group, passthrough_hook() if passthrough else AllReduceTimer(rec).hook)
    x = torch.randn(8, 16, device=device)

    def block(model) -> float:
        if cuda:
            torch.cuda.synchronize(device)
        drain = take if model is hooked else None
        t0 = time.perf_counter()
        for _ in range(n):  # no rec.begin(): the spans are stamped, not kept (its cost is the Recorder's)
            model(x).sum().backward()
            if drain is not None:  # the C++ hook's spans, taken as the Recorder takes them
                drain()
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
    return trimmed_mean_ci(diffs)


CALIBRATION_SIZES = tuple(range(8, 65, 2))  # --step-ms: image sizes tried, smallest first


def choose_size(measure, target_s: float, sizes=CALIBRATION_SIZES, agree=lambda past: past) -> dict:
    """The size whose ``measure(size)`` (seconds a step) lies nearest ``target_s``: sizes
    tried in order until one is past it (``agree``: every rank takes rank 0's word)."""
    tried = []
    for size in sizes:
        tried.append((size, measure(size)))
        if agree(tried[-1][1] >= target_s):
            break
    size, step = min(tried, key=lambda st: abs(st[1] - target_s))
    return {"image_size": size, "step_s": step, "tried": tried}


def per_set(values: list[float], starts: list[int]) -> list[float]:
    """Each set's 20 % trimmed mean of its ``values`` (NaN left out): the set starting at
    ``starts[i]`` holds ``values[starts[i]:starts[i + 1]]``; a set with none left gives none."""
    out = []
    for i, a in enumerate(starts):
        xs = [v for v in values[a:starts[i + 1] if i + 1 < len(starts) else len(values)] if v == v]
        if xs:
            out.append(trimmed_mean_ci(xs)[0])
    return out


def ab_interval(pairs: int, sets: int, lo: float, hi: float, pair_lo: float, pair_hi: float) -> str:
    """What the A/B line says of its interval: over the sets of copies where there are three
    or more (the pairs' own beside it), else over the pairs, saying what that leaves out."""
    if sets >= 3:
        return (f"{pairs:,} pairs over {sets} sets of fresh copies; 95% CI over the sets {lo:.3f}-{hi:.3f} "
                f"(over the pairs alone {pair_lo:.3f}-{pair_hi:.3f})")
    return f"{pairs:,} pairs, {sets} set(s) of copies; 95% CI {lo:.3f}-{hi:.3f}, the copies' own difference not in it"


def bare_steps(t):
    """``n`` plain DDP steps of the synthetic trainer ``t``: zero_grad, forward, loss,
    backward, step over its pool of batches; nothing timed, nothing kept."""
    def run(n: int) -> None:
        for _ in range(n):
            x, y = t.pool[t._i % len(t.pool)]
            t._i += 1
            t.optimizer.zero_grad(set_to_none=True)
            t.loss_fn(t.model(x), y).backward()
            t.optimizer.step()
    return run


def calibrate(ctx, args) -> dict:
    """--step-ms: the image size (the model's other knobs fixed) whose bare DDP step, on
    these ranks, lies nearest ``args.step_ms``: each size a median of 20 blocks of 5 steps.
    Rank 0's clock decides when to stop, so every rank builds the same models."""
    import torch
    import torch.distributed as dist

    from trainers.synthetic import SyntheticTrainer

    def measure(size: int) -> float:
        args.image_size = size
        cfg, plan = config(args)
        t = SyntheticTrainer(ctx, cfg, plan)
        times = []
        steps = bare_steps(t)
        for i in range(21):
            if ctx.world_size > 1:
                dist.barrier()
            t0 = time.perf_counter()
            steps(5)
            if i:  # the first block warms up
                times.append((time.perf_counter() - t0) / 5)
        return statistics.median(times)

    def agree(past: bool) -> bool:
        if ctx.world_size == 1:
            return past
        flag = torch.tensor([1 if past else 0])
        dist.broadcast(flag, src=0)
        return bool(flag.item())

    return choose_size(measure, args.step_ms / 1e3, sizes=args.calibration_sizes, agree=agree)
