"""What a profiler trace says about one rank: its window, how busy each device and
the host were in it, communication and how much of it was exposed, the top kernels
and operators. Definitions: the package docstring (campaign_trace/__init__.py).
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from campaign_trace.intervals import Interval, clip, length, merge, uncovered
from campaign_trace.load import TraceError, read_json
from campaign_trace.totals import profiler_totals

WINDOW_MARK = "campaign:profile_window"  # the annotation a campaign job puts around its profiled iterations
STEP_MARK = re.compile(r"^ProfilerStep#\d+$")  # torch.profiler.profile.step()'s annotations
DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")  # activity on a device (not its annotations)
HOST_OP_CATS = ("cpu_op",)  # operators on a host thread
ANNOTATION_CATS = ("user_annotation", "cpu_op")  # where window marks and gloo collectives appear
NOT_ACTIVITY_CATS = ("Trace", "overhead")  # the profiler's own span and its buffer bookkeeping
# NCCL collectives' device kernels under both naming schemes: ncclKernel_AllReduce_...
# (NCCL < 2.19) and ncclDevKernel_... / ncclDevFunc_... (later).
NCCL_KERNEL = re.compile(r"^nccl(Kernel|Dev)")
# gloo collectives: record_function annotations on gloo's worker threads (gloo:all_reduce).
GLOO_OP = re.compile(r"^gloo:", re.I)
# Host-side launches of collectives: neither compute nor the communication itself.
COMM_LAUNCH = re.compile(r"c10d::|^nccl:|^gloo:|allreduce|all_reduce|allgather|all_gather|reduce_scatter|broadcast",
                         re.I)
TOP = 10


@dataclass
class DeviceFigures:
    """One device (GPU) of the rank, over the window."""

    device: int
    name: Optional[str]  # from the trace's deviceProperties
    busy_s: float  # union of kernel, memcpy and memset intervals
    utilisation: float  # busy_s / span_s
    kernel_s: float  # union of kernel intervals
    memcpy_s: float
    memset_s: float
    kernels: int  # kernels that ran (some of their time) in the window
    comm_s: float  # union of NCCL kernel intervals
    exposed_comm_s: float  # the part of comm_s no other kernel covered


@dataclass
class TraceFigures:
    """A trace file's figures; ``to_dict()`` is what ``campaign trace --json`` prints."""

    file: str
    rank: Optional[int]  # distributedInfo.rank (None: not a distributed run)
    world_size: Optional[int]
    backend: Optional[str]
    window_source: str  # how the window was found (see the package docstring)
    window_start_us: float  # in the trace's own clock (its ts values)
    span_s: float
    cpu_op_s: float  # per host thread, the union of its operators' intervals; summed over threads
    cpu_busy_s: float  # the union of every thread's operator intervals: time the host ran any operator
    cpu_utilisation: float  # cpu_busy_s / span_s: <= 1, the host's analogue of the GPU's busy / span
    cpu_busy_cores: float  # cpu_op_s / span_s: mean number of busy threads (cores), can pass 1
    host_threads: int
    operators: int  # operator calls in the window
    cpu_collectives: int  # gloo collectives (host side) with some of their time in the window
    cpu_comm_s: float  # union of gloo collectives (host side)
    cpu_exposed_comm_s: float  # the part of it no operator of the rank's own threads covered
    devices: list[DeviceFigures] = field(default_factory=list)
    top_kernels: list[dict[str, Any]] = field(default_factory=list)
    top_operators: list[dict[str, Any]] = field(default_factory=list)
    # the profiler's own totals (campaign_trace/totals.py): sums, where busy is a union
    cpu_time_total_s: float = 0.0  # "Self CPU time total": every host event's self time, summed
    device_time_total_s: float = 0.0  # "Self CUDA time total": every device event's time, summed

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    # ------------------------------------------------------------ one rank, one row
    @property
    def gpu_busy_s(self) -> Optional[float]:
        """Mean busy time over the rank's devices (None without any)."""
        return sum(d.busy_s for d in self.devices) / len(self.devices) if self.devices else None

    @property
    def gpu_utilisation(self) -> Optional[float]:
        """Mean utilisation over the rank's devices (None without any)."""
        return sum(d.utilisation for d in self.devices) / len(self.devices) if self.devices else None

    @property
    def comm(self) -> tuple[Optional[float], Optional[float]]:
        """(comm_s, exposed_comm_s) of the rank: NCCL kernels where the devices ran any
        (mean over devices), else gloo's host-side collectives; (None, None) where the
        window holds no collective at all (one rank, or none traced): absent, not 0."""
        nccl = [d for d in self.devices if d.comm_s > 0]
        if nccl:
            return (sum(d.comm_s for d in self.devices) / len(self.devices),
                    sum(d.exposed_comm_s for d in self.devices) / len(self.devices))
        if self.cpu_collectives:
            return self.cpu_comm_s, self.cpu_exposed_comm_s
        return None, None


def _x_events(events: list) -> list[dict]:
    """Complete ('X') events with numeric ts and dur: the only ones with a duration."""
    out = []
    for e in events:
        if isinstance(e, dict) and e.get("ph") == "X":
            ts, dur = e.get("ts"), e.get("dur")
            if isinstance(ts, (int, float)) and isinstance(dur, (int, float)) and dur >= 0:
                out.append(e)
    return out


def find_window(xs: list[dict]) -> tuple[float, float, str]:
    """(start_us, end_us, source) of the profiled window; the package docstring says how."""
    marks = [e for e in xs if e.get("name") == WINDOW_MARK and e.get("cat") in ANNOTATION_CATS]
    source = f"annotation {WINDOW_MARK}"
    if not marks:
        marks = [e for e in xs if e.get("cat") in ANNOTATION_CATS and STEP_MARK.match(str(e.get("name", "")))]
        source = f"{len(marks)} ProfilerStep annotation(s)"
    if not marks:
        marks = [e for e in xs if e.get("cat") not in NOT_ACTIVITY_CATS]
        source = "first to last event"
    if not marks:
        raise TraceError("no profiled events")
    return min(e["ts"] for e in marks), max(e["ts"] + e["dur"] for e in marks), source


def _device_of(e: dict) -> int:
    dev = (e.get("args") or {}).get("device")
    if isinstance(dev, int):
        return dev
    return e["pid"] if isinstance(e.get("pid"), int) else -1


def _self_times(ops: list[tuple[float, float, str]]) -> list[tuple[str, float, float]]:
    """(name, inclusive, self) seconds-in-us of one thread's (start, end, name) operators:
    self = own time minus the time of the operators nested directly in it."""
    ops = sorted(ops, key=lambda o: (o[0], -(o[1] - o[0])))
    child = [0.0] * len(ops)
    stack: list[int] = []
    for i, (s, e, _) in enumerate(ops):
        while stack and ops[stack[-1]][1] <= s:
            stack.pop()
        if stack:
            child[stack[-1]] += min(e, ops[stack[-1]][1]) - s
        stack.append(i)
    return [(name, e - s, max(e - s - child[i], 0.0)) for i, (s, e, name) in enumerate(ops)]


def _top(rows: dict[str, dict[str, float]], key: str, n: int) -> list[dict[str, Any]]:
    ranked = sorted(rows.items(), key=lambda kv: (-kv[1][key], kv[0]))[:n]
    return [{"name": name, **vals} for name, vals in ranked]


def analyse(data: dict[str, Any], *, file: str = "", top: int = TOP) -> TraceFigures:
    """The figures of one trace (the object ``load.read_json`` returns)."""
    xs = _x_events(data["traceEvents"])
    w0, w1, source = find_window(xs)
    span_us = w1 - w0
    dist = data.get("distributedInfo") or {}
    names = {p.get("id"): p.get("name") for p in data.get("deviceProperties") or [] if isinstance(p, dict)}

    device_iv: dict[int, dict[str, list[Interval]]] = defaultdict(lambda: defaultdict(list))
    kernel_count: dict[int, int] = defaultdict(int)
    kernels: dict[str, dict[str, float]] = {}
    kernel_ext: list[tuple[Any, float]] = []
    thread_ops: dict[tuple, list[tuple[float, float, str]]] = defaultdict(list)
    gloo: list[Interval] = []
    gloo_threads: set = set()
    op_name_by_ext: dict[Any, str] = {}
    for e in xs:
        cat, name = e.get("cat"), str(e.get("name", ""))
        s, t = e["ts"], e["ts"] + e["dur"]
        inside = clip([(s, t)], w0, w1)
        if cat in DEVICE_CATS:
            if not inside and not (e["dur"] == 0 and w0 <= s <= w1):
                continue
            dev = _device_of(e)
            device_iv[dev][cat] += inside
            if cat == "kernel":
                kernel_count[dev] += 1
                d = sum(b - a for a, b in inside)
                k = kernels.setdefault(name, {"device": dev, "calls": 0, "total_s": 0.0})
                k["calls"] += 1
                k["total_s"] += d / 1e6
                kernel_ext.append(((e.get("args") or {}).get("External id"), d))
                if NCCL_KERNEL.match(name):
                    device_iv[dev]["nccl"] += inside
                else:
                    device_iv[dev]["compute"] += inside
            continue
        if cat in ANNOTATION_CATS and GLOO_OP.match(name):
            gloo += inside
            gloo_threads.add((e.get("pid"), e.get("tid")))
            continue
        if cat in HOST_OP_CATS:
            ext = (e.get("args") or {}).get("External id")
            if ext is not None:
                op_name_by_ext[ext] = name
            if inside:
                thread_ops[(e.get("pid"), e.get("tid"))].append((inside[0][0], inside[0][1], name))

    devices = []
    for dev in sorted(device_iv):
        iv = device_iv[dev]
        busy = length(merge(iv["kernel"] + iv["gpu_memcpy"] + iv["gpu_memset"]))
        comm, exposed = uncovered(iv["nccl"], iv["compute"])
        devices.append(DeviceFigures(
            device=dev, name=names.get(dev), busy_s=busy / 1e6, utilisation=busy / span_us if span_us > 0 else 0.0,
            kernel_s=length(merge(iv["kernel"])) / 1e6, memcpy_s=length(merge(iv["gpu_memcpy"])) / 1e6,
            memset_s=length(merge(iv["gpu_memset"])) / 1e6, kernels=kernel_count[dev],
            comm_s=comm / 1e6, exposed_comm_s=exposed / 1e6))

    cpu_us, n_ops = 0.0, 0
    ops: dict[str, dict[str, float]] = {}
    own_compute: list[Interval] = []
    every_thread: list[Interval] = []
    for thread, rows in thread_ops.items():
        cpu_us += length(merge((s, e) for s, e, _ in rows))
        every_thread += [(s, e) for s, e, _ in rows]
        n_ops += len(rows)
        if thread not in gloo_threads:
            own_compute += [(s, e) for s, e, name in rows if not COMM_LAUNCH.search(name)]
        for name, incl, self_us in _self_times(rows):
            o = ops.setdefault(name, {"calls": 0, "total_s": 0.0, "self_s": 0.0, "device_s": 0.0})
            o["calls"] += 1
            o["total_s"] += incl / 1e6
            o["self_s"] += self_us / 1e6
    for ext, d in kernel_ext:  # a kernel's time to the operator that launched it
        name = op_name_by_ext.get(ext)
        if name in ops:
            ops[name]["device_s"] += d / 1e6
    cpu_comm, cpu_exposed = uncovered(gloo, own_compute)
    host_us = length(merge(every_thread))
    cpu_total_us, device_total_us = profiler_totals(xs, w0, w1, _is_mark)
    rank = dist.get("rank")
    return TraceFigures(
        file=file, rank=rank if isinstance(rank, int) else None,
        world_size=dist.get("world_size") if isinstance(dist.get("world_size"), int) else None,
        backend=dist.get("backend"), window_source=source, window_start_us=w0, span_s=span_us / 1e6,
        cpu_op_s=cpu_us / 1e6, cpu_busy_s=host_us / 1e6, cpu_utilisation=host_us / span_us if span_us > 0 else 0.0,
        cpu_busy_cores=cpu_us / span_us if span_us > 0 else 0.0,
        host_threads=len(thread_ops), operators=n_ops, cpu_collectives=len(gloo), cpu_comm_s=cpu_comm / 1e6,
        cpu_exposed_comm_s=cpu_exposed / 1e6,
        devices=devices, top_kernels=_top(kernels, "total_s", top),
        top_operators=_top(ops, "device_s" if devices else "self_s", top),
        cpu_time_total_s=cpu_total_us / 1e6, device_time_total_s=device_total_us / 1e6)


def _is_mark(e: dict) -> bool:
    """An annotation that marks the window (find_window's), not work inside it."""
    name = str(e.get("name", ""))
    return e.get("cat") in ANNOTATION_CATS and (name == WINDOW_MARK or bool(STEP_MARK.match(name)))


def read_trace(path, *, top: int = TOP, max_memory_bytes: Optional[int] = None) -> TraceFigures:
    """Read and analyse one trace file (``.json`` or ``.json.gz``); TraceError if it is not
    one. ``max_memory_bytes``: what parsing it may take (``load.read_json``; default
    ``load.max_memory()``)."""
    import os

    name = os.fspath(path)
    data = read_json(name, max_memory_bytes=max_memory_bytes)
    try:
        return analyse(data, file=name, top=top)
    except TraceError as exc:
        raise TraceError(f"{name}: {exc}") from None


def profile_row(fig: TraceFigures, *, iterations: int) -> dict[str, Any]:
    """The ``profile`` table's row of one rank (sql/schema.py) from its trace's figures;
    ``top_ops`` carries the profiler's totals (campaign_trace/totals.py, the reference
    study's eq. 3.3 terms): ``cpu_time_total_s`` and, with a device, ``device_time_total_s``."""
    comm, exposed = fig.comm
    totals = {"cpu_time_total_s": fig.cpu_time_total_s,
              "device_time_total_s": fig.device_time_total_s if fig.devices else None}
    return {
        "iterations": iterations,
        "total_s": fig.span_s,
        "cpu_s": fig.cpu_op_s,  # thread-seconds: cpu_s / total_s is the mean number of busy cores
        "device_s": fig.gpu_busy_s,
        "cpu_util": fig.cpu_utilisation,
        "gpu_util": fig.gpu_utilisation,
        "comm_s": comm,
        "exposed_comm_s": exposed,
        "top_ops": totals,
    }
