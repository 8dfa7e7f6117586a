"""DeepSpeed's communication and timers, as the DDP path defines its breakdown.

DDP's gradient all-reduce is timed by trainers.comm's hook: one span per bucket, from
launch to completion, on the Recorder's clock; the Recorder turns the spans into
``comm`` (in flight), ``comm_exposed`` (last completion - last launch) and
``backward_compute`` (``backward - comm_exposed``), so that data + forward +
backward_compute + comm_exposed + step tile the iteration (docs/breakdown.md).

DeepSpeed reduces its gradients inside ``engine.backward()``, after autograd
(``_backward_epilogue`` calls ``engine.allreduce_gradients()``), under its own
``bwd_allreduce`` timer. ``DeepSpeedComm`` wraps that one call on the engine instance
and reports it to the Recorder as a span, as the DDP hook reports a bucket, so its
figures are DDP's by construction: at ZeRO stage 0 the reduction runs after the last
gradient is computed, so all of it is exposed (``comm_exposed`` = the span) and
``backward_compute`` is what autograd took. Nothing else counts it: the old
``add_comm(bwd_allreduce)`` on top of a ``backward`` that already held it counted it
twice (the shares summed to 1.06 at one GPU and 1.20 at two).

At one rank there is no communication: ``allreduce_gradients`` still runs (DeepSpeed's
gradient bookkeeping: flattening, a copy, an all-reduce over a group of one), is not
wrapped, and stays in ``backward`` (compute); the rank has no ``comm`` at all, as a
one-rank DDP run has none. Its time is still in the ``deepspeed.bwd_allreduce`` row.

DeepSpeed's own timers (``fwd``, ``bwd``, ``bwd_inner``, ``bwd_allreduce``, ``step``: its
global timer names) are kept beside the job's phases under their own names,
``deepspeed.<timer>``, over the timed iterations. They are DeepSpeed's wall clocks, not
the Recorder's: close to the job's phases, never added to them.

Limits: with ZeRO stage >= 2 and ``overlap_comm`` the gradients are reduced by
backward hooks while autograd runs; only the epilogue (the final reduction) is in the
span, and the rest counts as backward compute (the profiler window's ``comm_s`` has it
all). With gradient accumulation at stage 0 only the boundary micro-batch reduces.
"""

from __future__ import annotations

from typing import Any, Optional

from trainers.parallel import breakdown_row

TIMERS = ("fwd", "bwd", "bwd_inner", "bwd_allreduce", "step")  # DeepSpeed's global timer names
PREFIX = "deepspeed."  # breakdown rows of its timers: deepspeed.<timer>


class DeepSpeedComm:
    """Times ``engine.allreduce_gradients()`` as one Recorder span (world size > 1) and
    collects DeepSpeed's timers after every optimizer step."""

    def __init__(self, engine: Any, world_size: int):
        self.engine = engine
        self.world_size = int(world_size)
        self.recorder: Optional[Any] = None  # the Recorder of the iteration running (set by ``begin``)
        self.times: list[dict[str, float]] = []  # DeepSpeed's timers per iteration, seconds
        # What one reduction moves: every trainable parameter's gradient, in the
        # parameters' dtype (DeepSpeed's fp16/bf16 modes keep half-precision gradients).
        self.grad_bytes = sum(p.numel() * p.element_size() for p in engine.module.parameters() if p.requires_grad)
        if self.world_size > 1:
            reduce = engine.allreduce_gradients  # the bound method; the instance attribute shadows it

            def timed_allreduce(*args, **kwargs):
                if not self._communicates():
                    return reduce(*args, **kwargs)
                rec = self.recorder
                span = rec.comm_span(self.grad_bytes) if rec is not None else None
                out = reduce(*args, **kwargs)
                if span is not None:
                    span[1] = rec.stamp()
                return out

            engine.allreduce_gradients = timed_allreduce

    def _communicates(self) -> bool:
        """Whether this call reduces anything: at stage 0/1 only the accumulation
        boundary does; stage >= 2 reduces its partitions on every micro-batch."""
        e = self.engine
        return bool(e.zero_optimization_partition_gradients() or e.is_gradient_accumulation_boundary())

    def begin(self, rec: Any) -> None:
        """The Recorder this iteration reports to (the profiler window brings its own)."""
        self.recorder = rec

    def read_timers(self) -> None:
        """DeepSpeed's timers of the step just taken (it refreshes them at every step)."""
        self.times.append({t: ms / 1000.0 for t, ms in self.engine.get_wall_clock_timers().items() if t in TIMERS})

    def breakdown_rows(self, start: int, stop: int) -> list[dict]:
        """``deepspeed.<timer>`` rows over iterations ``start`` .. ``stop - 1`` (the timed window)."""
        timed = self.times[start:stop]
        rows = []
        for name in TIMERS:
            vals = [t[name] for t in timed if name in t]
            if vals:
                rows.append(breakdown_row(f"{PREFIX}{name}", vals))
        return rows

    def extra(self) -> dict[str, Any]:
        """rank_timing.extra: who timed the communication (docs/breakdown.md, ``comm_source``)."""
        return {"comm_source": "deepspeed" if self.world_size > 1 else None}
