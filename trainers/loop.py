"""The generic iteration loop and the profiled window that follows it.

With ``experiment.validation=true`` the trainer's evaluation pass (trainers/evaluate.py)
runs between iterations when an epoch ends, and once more at the end for the epoch in
progress; its time is taken off the timed window (``Recorder.exclude``).

The profiler window runs *after* the timed window and its rows are written: a
profiler that fails (it has: torch's private objects move between versions) costs
the run its profile figures, never its timing rows. Its figures come from the trace
the window exports, read by ``campaign_trace`` (the same reader as ``campaign
trace``), not from torch's profiler objects.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from campaign_trace import WINDOW_MARK, profile_row, read_trace
from campaign_trace.load import max_memory
from trainers.evaluate import evaluator_of
from trainers.instrument import Recorder

# Test knob: make the profiler fail at one of its stages (start, stop, export, read).
INJECT_ENV = "CAMPAIGN_INJECT_PROFILER_ERROR"
STAGES = ("start", "stop", "export", "read")
OWN_TRACE_MEMORY = 8 * 2**30  # what reading its own trace may take (campaign_trace.load.parse_memory): ~1 GB of JSON


class InjectedProfilerError(RuntimeError):
    """The failure the test knob asks for."""


def train(trainer, rec: Recorder, total_iterations: int, between: Optional[Callable[[int], None]] = None) -> None:
    """Run ``total_iterations`` (warm-up included) from where ``rec`` stands (0, or the
    iteration a resumed run's checkpoint holds) and close the timed window;
    ``between(done)`` runs after each iteration, outside it (trainers/checkpoint.py); so
    does the trainer's evaluation pass when an epoch has just ended (not training time), and
    the trainer's ``stop_now()``, which may end the run before ``total_iterations``."""
    evaluator = evaluator_of(trainer)
    stop_now = getattr(trainer, "stop_now", None)  # ends the run early when it says so (every rank alike)
    if hasattr(trainer, "run"):
        trainer.run(rec, total_iterations)
    else:
        for done in range(rec.iterations_done + 1, total_iterations + 1):
            rec.begin()
            loss = trainer.step(rec)
            rec.end(loss, trainer.images_per_step)
            if between is not None:
                between(done)
            if evaluator is not None:
                rec.exclude(evaluator.after_iteration())
            if stop_now is not None:  # the trainer's stop rule (frozen_backbone: trainers/dp_study.py)
                t0 = time.perf_counter()
                stop = stop_now()
                rec.exclude(time.perf_counter() - t0)
                if stop:
                    break
    rec.finish()
    if evaluator is not None:
        evaluator.at_end()  # after the window has closed: nothing to take off


def _stage(name: str) -> None:
    if os.environ.get(INJECT_ENV) == name:
        raise InjectedProfilerError(f"injected profiler failure at {name} ({INJECT_ENV}={name})")


def _why(stage: str, exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
    return f"profiler {stage} failed: {type(exc).__name__}" + (f": {text}" if text else "")


def profile_window(trainer, device: torch.device, iterations: int, *, trace_path: Optional[Path],
                   comm_timer: Optional[Any] = None) -> tuple[dict, Optional[str]]:
    """Profile ``iterations`` more iterations (after the timed window, never inside it).

    Returns the rank's ``profile`` row and a warning (None if all went well). The
    iterations always run, profiler or not, so that every rank makes the same
    collectives whatever fails on one of them. The window is the
    ``campaign:profile_window`` annotation, device-synchronised at both ends; its trace
    goes to ``trace_path`` (gzipped chrome trace) and its figures come from reading it
    back. On a profiler failure the row keeps the iterations and the wall time, and
    ``top_ops`` says why (``warning``); the other figures are absent (NULL).
    ``comm_timer`` (an AllReduceTimer) reports to this window's own Recorder meanwhile.
    """
    from torch.profiler import ProfilerActivity, profile, record_function

    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    rec = Recorder(device, warmup=0, expected_iterations=iterations)
    saved = comm_timer.recorder if comm_timer is not None else None
    warning: Optional[str] = None
    prof = None
    try:
        _stage("start")
        prof = profile(activities=activities)
        prof.start()
    except Exception as exc:  # no profiler: the iterations still run, unprofiled
        warning, prof = _why("start", exc), None
    if comm_timer is not None:
        comm_timer.recorder = rec
    try:
        if cuda:
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        with record_function(WINDOW_MARK):
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
    row: dict[str, Any] = {"iterations": iterations, "total_s": total, "cpu_s": None, "device_s": None,
                           "cpu_util": None, "gpu_util": None, "comm_s": None, "exposed_comm_s": None}
    written = None
    stage = "stop"
    try:
        if prof is not None:
            _stage("stop")
            prof.stop()
            if trace_path is not None:
                stage = "export"
                _stage("export")
                Path(trace_path).parent.mkdir(parents=True, exist_ok=True)
                prof.export_chrome_trace(str(trace_path))
                written = str(trace_path)
                stage = "read"
                _stage("read")
                # its own trace, just written: bounded for a long profile, not as one from anyone
                fig = read_trace(trace_path, max_memory_bytes=max(OWN_TRACE_MEMORY, max_memory()))
                row = profile_row(fig, iterations=iterations)  # its top_ops: the profiler's totals (eq. 3.3)
                row["top_ops"] = dict(row["top_ops"], kernels=fig.top_kernels, operators=fig.top_operators)
    except Exception as exc:
        warning = _why(stage, exc)
    top = dict(row.get("top_ops") or {}, trace_file=written, wall_s=total)
    if warning:
        top["warning"] = warning
    row["top_ops"] = top
    return row, warning
