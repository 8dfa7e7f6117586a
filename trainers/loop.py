"""The generic iteration loop and the profiled window that follows it."""

from __future__ import annotations

import re
import time

import torch

from trainers.instrument import Recorder

# Communication ops/kernels: NCCL kernels by their old and new names, gloo and c10d ops.
COMM_PATTERN = re.compile(r"nccl(Kernel|Dev)|^nccl|gloo|c10d::|allreduce|all_reduce|broadcast_|allgather|reduce_scatter", re.I)


def train(trainer, rec: Recorder, total_iterations: int) -> None:
    """Run ``total_iterations`` (warm-up included) and close the timed window."""
    if hasattr(trainer, "run"):
        trainer.run(rec, total_iterations)
    else:
        for _ in range(total_iterations):
            rec.begin()
            loss = trainer.step(rec)
            rec.end(loss, trainer.images_per_step)
    rec.finish()


def profile_window(trainer, device: torch.device, iterations: int) -> dict:
    """Profile ``iterations`` more iterations (outside the timed window).

    Utilisation as the reference study defines it: device (GPU) time / total time
    and CPU time / total time, from the PyTorch profiler's self times.
    """
    from torch.profiler import ProfilerActivity, profile

    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    rec = Recorder(device, warmup=0)
    with profile(activities=activities) as prof:
        if cuda:
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        for _ in range(iterations):
            rec.begin()
            loss = trainer.step(rec)
            rec.end(loss, getattr(trainer, "images_per_step", 0))
        if cuda:
            torch.cuda.synchronize(device)
        total = time.perf_counter() - t0
    events = prof.key_averages()
    cpu_us = sum(e.self_cpu_time_total for e in events)
    dev_us = sum(getattr(e, "self_device_time_total", 0) for e in events) if cuda else 0
    comm_key = "self_device_time_total" if cuda else "self_cpu_time_total"
    comm_us = sum(getattr(e, comm_key, 0) for e in events if COMM_PATTERN.search(e.key))
    rank_key = (lambda e: getattr(e, "self_device_time_total", 0)) if cuda else (lambda e: e.self_cpu_time_total)
    top = sorted(events, key=rank_key, reverse=True)[:10]
    return {
        "iterations": iterations,
        "total_s": total,
        "cpu_s": cpu_us / 1e6,
        "device_s": dev_us / 1e6 if cuda else None,
        "cpu_util": (cpu_us / 1e6) / total if total > 0 else None,
        "gpu_util": (dev_us / 1e6) / total if cuda and total > 0 else None,
        "comm_s": comm_us / 1e6,
        "exposed_comm_s": None,
        "top_ops": [
            {"name": e.key, "calls": e.count, "self_cpu_s": e.self_cpu_time_total / 1e6,
             "self_device_s": getattr(e, "self_device_time_total", 0) / 1e6 if cuda else None}
            for e in top
        ],
    }
