"""The profiler's own totals of a window: its "Self CPU time total" and "Self CUDA time total".

What the reference study's eq. 3.3 is computed from (swinv2-ddp-scalability-thesis.txt,
section 4.2: "PyTorch Profiler offers functionality to track CPU and CUDA (GPU) time ...
From the CPU and GPU time over 8 iterations, CPU and GPU utilization metrics are
calculated"; section 3.1, eq. 3.3: "the ratio of the amount of compute time spent for a
specific device, T_d, to the total compute time, T_t"). The totals are *sums*, as the
profiler's table (``key_averages().table()``) adds them up, not the unions the physical
utilisation is taken from (``busy``: campaign_trace/__init__.py):

cpu   the sum of every host event's *self* time (its time less its children's): per host
      thread, an event's children are the events it contains, as torch's profiler nests
      them (events sorted by start, longest first; an event belongs to the innermost open
      event that contains it whole), so the sum is the length of the thread's outermost
      events, summed over threads (thread-seconds). Host events are the ones the profiler
      lists with a CPU time: operators (``cpu_op``), ``record_function`` annotations
      (``user_annotation``), CUDA runtime and driver calls (``cuda_runtime``,
      ``cuda_driver``). The window's own marks (``campaign:profile_window``, torch's
      ``ProfilerStep#N``) are left out: they are the window, not work in it.
cuda  the sum of the device events' durations (``kernel``, ``gpu_memcpy``, ``gpu_memset``)
      over every device of the trace: two kernels at once on two streams count twice, as
      the profiler's total counts them. Device annotations (``gpu_user_annotation``) are
      not activity (the profiler leaves them out of its total too).

Every interval is clipped to the window first (as every figure of the package is).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Callable

from campaign_trace.intervals import clip

HOST_TOTAL_CATS = ("cpu_op", "user_annotation", "cuda_runtime", "cuda_driver")  # host events with a CPU time
DEVICE_TOTAL_CATS = ("kernel", "gpu_memcpy", "gpu_memset")  # device activity with a CUDA time


def outermost_length(events: list[tuple[float, float]]) -> float:
    """The sum of self times of one thread's ``(start, end)`` events, nested as torch's
    profiler nests them (its ``_populate_cpu_children``): the length of the events no other
    open event contains whole."""
    total, stack = 0.0, []
    for s, e in sorted(events, key=lambda iv: (iv[0], -iv[1])):
        while stack and (s >= stack[-1][1] or e > stack[-1][1]):
            stack.pop()
        if not stack:
            total += e - s
        stack.append((s, e))
    return total


def profiler_totals(xs: list[dict], w0: float, w1: float, is_mark: Callable[[dict], bool]) -> tuple[float, float]:
    """(CPU total, CUDA total) in the trace's units (us) of the complete events ``xs``
    inside the window ``[w0, w1]``; ``is_mark``: an event that marks the window (left out)."""
    threads: dict[tuple, list[tuple[float, float]]] = defaultdict(list)
    device = 0.0
    for e in xs:
        cat = e.get("cat")
        if cat in DEVICE_TOTAL_CATS:
            s, t = e["ts"], e["ts"] + e["dur"]
            # inside: its own duration (ts + dur - ts loses digits at a clock of 1e15 us)
            device += e["dur"] if w0 <= s and t <= w1 else sum(b - a for a, b in clip([(s, t)], w0, w1))
        elif cat in HOST_TOTAL_CATS and not is_mark(e):
            threads[(e.get("pid"), e.get("tid"))] += clip([(e["ts"], e["ts"] + e["dur"])], w0, w1)
    return sum(outermost_length(iv) for iv in threads.values()), device
