"""The generic iteration loop and the profiled window that follows it."""

from __future__ import annotations

import time
from typing import Any, Optional

import torch

from trainers.comm import profile_comm
from trainers.instrument import Recorder


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


def profile_window(trainer, device: torch.device, iterations: int, comm_timer: Optional[Any] = None) -> dict:
    """Profile ``iterations`` more iterations (after the timed window, never inside it).

    Utilisation as the reference study defines it: device (GPU) time / total time
    and CPU time / total time, from the PyTorch profiler's self times. Communication
    from the trace (trainers.comm.profile_comm): ``comm_s`` = time NCCL kernels (CPU:
    gloo collectives) ran, ``exposed_comm_s`` = the part of it no compute overlapped.
    ``comm_timer`` (an AllReduceTimer) reports to this window's own Recorder meanwhile.
    """
    from torch.profiler import ProfilerActivity, profile

    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    rec = Recorder(device, warmup=0)
    saved = comm_timer.recorder if comm_timer is not None else None
    if comm_timer is not None:
        comm_timer.recorder = rec
    try:
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
    finally:
        if comm_timer is not None:
            comm_timer.recorder = saved
    events = prof.key_averages()
    cpu_us = sum(e.self_cpu_time_total for e in events)
    dev_us = sum(getattr(e, "self_device_time_total", 0) for e in events) if cuda else 0
    comm_s, exposed_s = profile_comm(prof, cuda)
    rank_key = (lambda e: getattr(e, "self_device_time_total", 0)) if cuda else (lambda e: e.self_cpu_time_total)
    top = sorted(events, key=rank_key, reverse=True)[:10]
    return {
        "iterations": iterations,
        "total_s": total,
        "cpu_s": cpu_us / 1e6,
        "device_s": dev_us / 1e6 if cuda else None,
        "cpu_util": (cpu_us / 1e6) / total if total > 0 else None,
        "gpu_util": (dev_us / 1e6) / total if cuda and total > 0 else None,
        "comm_s": comm_s,
        "exposed_comm_s": exposed_s,
        "top_ops": [
            {"name": e.key, "calls": e.count, "self_cpu_s": e.self_cpu_time_total / 1e6,
             "self_device_s": getattr(e, "self_device_time_total", 0) / 1e6 if cuda else None}
            for e in top
        ],
    }
