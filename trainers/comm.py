"""Communication: the DDP gradient all-reduce timed bucket by bucket, the bytes it
moves and the bus bandwidth it achieves. (Communication in the profiler window comes
from its trace: campaign_trace.)

On a CPU model the all-reduce is timed by the same hook in C++ (trainers/comm_cpp.py:
no Python call per bucket, the cost that kept this one above 1 % of a 2.5 ms step);
``attach`` falls back to the Python one below where that cannot be built or loaded, and
CUDA models (whose spans are CUDA events) and ``experiment.comm_hook=python`` use it.

``AllReduceTimer`` is a DDP communication hook doing what DDP's default does (the mean
of the bucket over the ranks: gloo's own average on CPU, divide then sum on CUDA) and reporting to the Recorder one span
per bucket: launch -> completion, with the Recorder's clock. On CPU (gloo) both are
``perf_counter`` readings, the completion taken in the future's callback (for the
last bucket of an iteration: when the hook's own wait returns); on CUDA
both are CUDA events (the completion one recorded in the callback, on a stream that
waits for the collective), resolved after the run: no synchronize per iteration.

The all-reduce overlaps backward: a bucket is launched as soon as its gradients are
computed while backward goes on, and ``loss.backward()`` returns only once every
bucket has completed. So the ``backward`` phase = backward compute + exposed comm,
where exposed comm = last bucket's completion - last bucket's launch (the launch of
the last bucket is when the last gradient was computed). docs/breakdown.md has the
whole story.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Optional

import torch

from trainers.instrument import Recorder


class AllReduceTimer:
    """DDP's default all-reduce, timed per bucket (see the module docstring).

    ``recorder`` is the Recorder the spans go to (the profiler window swaps in its
    own). ``inject_delay_s`` (tests only, CPU clocks): the last bucket of every
    iteration completes that much later, as a slow all-reduce would.
    """

    def __init__(self, recorder: Recorder, *, inject_delay_s: float = 0.0):
        self.recorder = recorder
        self.inject_delay_s = float(inject_delay_s or 0.0)
        # On CPU (gloo) the mean is gloo's own ReduceOp.AVG: no separate division of the
        # bucket from Python (a dispatcher call per bucket, the hook's largest cost after
        # its own call); DDP's builtin path fuses that division into the gradient copy.
        # CUDA keeps DDP's order, divide then sum (a half-precision sum of undivided
        # gradients could overflow). ``None``: not tried yet; False: refused, divide.
        self._avg: Optional[bool] = None
        self._avg_opts = None
        self._last: Optional[tuple[int, int, torch.futures.Future]] = None  # see _completed

    def _completed(self, tensor: torch.Tensor, nbytes: int) -> torch.futures.Future:
        """A completed future of ``tensor`` (reduced in place). The last bucket's buffer is the
        same memory every iteration (until DDP rebuilds its buckets: then its address or size
        changes), and a completed future answers ``wait``/``value`` as often as asked, so one
        future serves every iteration: a new one costs ~3.5 us a step."""
        key = tensor.data_ptr()
        last = self._last
        if last is not None and last[0] == key and last[1] == nbytes:
            return last[2]
        fut = torch.futures.Future()
        fut.set_result(tensor)
        self._last = (key, nbytes, fut)
        return fut

    def _allreduce_mean(self, process_group, tensor: torch.Tensor):
        """Launch the all-reduce that leaves the mean of ``tensor`` over the group in it."""
        if self._avg is None:
            self._avg = False
            if not tensor.is_cuda:
                import torch.distributed as dist

                opts = dist.AllreduceOptions()
                opts.reduceOp = dist.ReduceOp.AVG
                try:  # a backend without AVG refuses before anything is sent (every rank alike)
                    work = process_group.allreduce([tensor], opts)
                except (RuntimeError, ValueError):
                    pass
                else:
                    self._avg, self._avg_opts = True, opts
                    return work
        if self._avg:
            return process_group.allreduce([tensor], self._avg_opts)
        tensor.div_(process_group.size())
        # The process group's own allreduce (SUM), as DDP's builtin path calls it: no
        # Python-level checks of dist.all_reduce on the hot path.
        return process_group.allreduce([tensor])

    def hook(self, process_group, bucket):  # no annotations: DDP checks them against its own types
        """DDP comm hook: (process group or None, GradBucket) -> future of the reduced bucket."""
        if process_group is None:
            import torch.distributed as dist

            process_group = dist.group.WORLD
        tensor = bucket.buffer()
        rec = self.recorder
        nbytes = tensor.nbytes
        span = rec.comm_span(nbytes)
        work = self._allreduce_mean(process_group, tensor)
        last = bucket.is_last()
        delay = self.inject_delay_s if last else 0.0
        if last and not tensor.is_cuda:
            # The last bucket is launched once backward has computed every gradient, and
            # DDP waits for it right after this hook returns: waiting here costs no
            # overlap and spares a Python callback on gloo's thread (a GIL hand-over,
            # ~30 us a bucket: most of the hook's cost for a small model).
            work.wait()
            if delay:
                time.sleep(delay)
            span[1] = rec.stamp()
            return self._completed(tensor, nbytes)

        def done(f: torch.futures.Future) -> torch.Tensor:
            if delay:
                time.sleep(delay)
            span[1] = rec.stamp()
            return f.value()[0]

        return work.get_future().then(done)


def attach(trainer: Any, rec: Recorder, *, inject_delay_s: float = 0.0,
           hook: str = "auto") -> tuple[Optional[Any], Optional[str], dict]:
    """Time the gradient all-reduce of ``trainer.model`` if it is a DDP module.

    Returns the timer (None if none was attached), who times the all-reduce
    (``"allreduce_timer"``: this project's hook; ``"trainer"``: the trainer registered a
    comm hook of its own, which DDP allows only once, and its ``add_comm`` figures stand;
    None: no DDP module, no gradient all-reduce to time) and the rank row's extra keys
    saying which hook: ``comm_hook`` ``"cpp"`` (trainers.comm_cpp, on CPU) or ``"python"``
    (AllReduceTimer), and ``comm_hook_fallback``, why not C++ where ``hook="auto"`` tried it.
    ``hook``: ``"auto"`` (C++ on CPU where it builds and loads on every rank, else Python),
    ``"cpp"`` (C++ or a RuntimeError saying why), ``"python"``.
    """
    from torch.nn.parallel import DistributedDataParallel

    model = getattr(trainer, "model", None)
    if not isinstance(model, DistributedDataParallel):
        return None, None, {}
    if getattr(model, "_comm_hooks", None) or getattr(model, "_campaign_comm_hook", False):
        return None, "trainer", {}
    extra: dict[str, Any] = {}
    if hook in ("auto", "cpp"):
        why = _cpp_refusal(model)
        if why is None:
            from trainers import comm_cpp

            try:
                timer = comm_cpp.attach(model, rec, inject_delay_s=inject_delay_s)
            except RuntimeError:  # a hook registered already (the same on every rank)
                return None, "trainer", {}
            model._campaign_comm_hook = True  # DDP's Python side does not see a C++ hook
            return timer, "allreduce_timer", {"comm_hook": "cpp"}
        if hook == "cpp":
            raise RuntimeError(f"experiment.comm_hook=cpp: {why}")
        if why != NOT_CPU:  # on CUDA the Python hook is the design, not a fallback
            extra["comm_hook_fallback"] = why
    timer = AllReduceTimer(rec, inject_delay_s=inject_delay_s)
    try:
        model.register_comm_hook(getattr(model, "process_group", None), timer.hook)
    except RuntimeError:  # a builtin hook registered already
        return None, "trainer", {}
    return timer, "allreduce_timer", {"comm_hook": "python", **extra}


NOT_CPU = "not a CPU model (the C++ hook times CPU clocks; CUDA keeps the Python hook's events)"


def _cpp_refusal(model: Any) -> Optional[str]:
    """Why this job cannot use the C++ hook (None: it can), the same answer on every rank:
    a rank that cannot build or load it makes them all use the Python one."""
    import torch
    import torch.distributed as dist

    from trainers import comm_cpp

    params = list(model.parameters())
    if not params or any(p.device.type != "cpu" for p in params):
        return NOT_CPU
    why: Optional[str] = None
    try:
        comm_cpp.load_module()
    except comm_cpp.HookUnavailable as exc:
        why = str(exc)
    except Exception as exc:  # anything else on this rank (an unreadable folder, no HOME): still agree below
        why = f"loading the C++ comm hook failed: {type(exc).__name__}: {str(exc).strip()[:200]}"
    pg = getattr(model, "process_group", None) or dist.group.WORLD
    flag = torch.tensor([0 if why else 1], dtype=torch.int32)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=pg)
    if why is None and int(flag.item()) == 0:
        why = "another rank could not load the C++ comm hook"
    return why


def bus_factor(world_size: int) -> float:
    """Ring all-reduce bus bandwidth factor 2(n-1)/n (nccl-tests' busbw convention)."""
    return 2.0 * (world_size - 1) / world_size if world_size > 1 else 0.0


def allreduce_extra(ar_rows: list[dict], *, world_size: int, interconnect_gbs: Optional[float],
                    iterations_per_epoch: Optional[float]) -> dict[str, Any]:
    """rank_timing.extra keys from the timed iterations' all-reduce figures
    (``Recorder.allreduce_rows()``); empty without any. ``interconnect_gbs``: the platform's
    stated GPU-GPU bandwidth, both directions together (datasheets, the reference study's
    Table 1); a ring's bus bandwidth is bounded by one direction, half of it, so the fraction
    is busbw / (interconnect / 2): 1.0 is the link's own speed."""
    if not ar_rows:
        return {}
    per_iter = statistics.median(a["bytes"] for a in ar_rows)
    busy = sum(a["busy_s"] for a in ar_rows)
    algbw = sum(a["bytes"] for a in ar_rows) / busy / 1e9 if busy > 0 else None
    busbw = algbw * bus_factor(world_size) if algbw is not None else None
    return {
        "allreduce_bytes_per_iter": int(per_iter),
        "allreduce_buckets_per_iter": int(statistics.median(a["buckets"] for a in ar_rows)),
        "allreduce_bytes_per_epoch": per_iter * iterations_per_epoch if iterations_per_epoch else None,
        "allreduce_s": busy,
        "allreduce_span_s": sum(a["span_s"] for a in ar_rows),
        "exposed_comm_s": sum(a["exposed_s"] for a in ar_rows),
        "allreduce_algbw_gbs": algbw,
        "allreduce_busbw_gbs": busbw,
        "interconnect_bandwidth_gbs": interconnect_gbs or None,
        "allreduce_busbw_fraction": busbw / (interconnect_gbs / 2) if busbw is not None and interconnect_gbs else None,
    }


def dataset_size_of(trainer: Any) -> Optional[int]:
    """Samples in one epoch of the trainer's training set, where it says."""
    size = getattr(trainer, "dataset_size", None)
    if size:
        return int(size)
    loader = getattr(trainer, "loader", None)
    try:
        return len(loader.dataset) if loader is not None else None
    except TypeError:  # an iterable dataset without a length
        return None


def sync_volume_extra(*, trainable_params: Optional[int], bytes_per_element: int, dataset_size: Optional[int],
                      images_per_iter: int, world_size: int) -> dict[str, Any]:
    """Plain data parallelism's synchronisation volume (the DataParallel study): every
    iteration all-reduces every trainable parameter once, N/(B k) iterations per epoch."""
    if world_size < 2 or not trainable_params:
        return {}
    ipe = dataset_size / images_per_iter if dataset_size and images_per_iter else None
    out: dict[str, Any] = {"grad_bytes_per_sync": trainable_params * bytes_per_element,
                           "dataset_size": dataset_size, "iterations_per_epoch": ipe}
    if ipe is not None:
        out["sync_params_per_epoch"] = ipe * trainable_params
        out["sync_bytes_per_epoch"] = ipe * trainable_params * bytes_per_element
    return out
