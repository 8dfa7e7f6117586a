"""Per-iteration timing of one rank: the timed window, warm-up apart, and phases.

A trainer's loop calls ``begin()`` at the start of each iteration, ``mark(phase)``
when a phase ends (``data``, ``forward``, ``backward``, ``step``, ``comm``), and
``end(loss, images)`` at its end; ``finish()`` closes the timed window.

On CPU every mark is a ``perf_counter`` reading. On CUDA marks are CUDA events from
a pool (trainers/events.py): nothing in an iteration waits for the device (no
synchronize, no ``.item()``, no event query). Every ``resolve_every`` iterations (CUDA:
1024) the iterations older than that whose events have completed are *compacted*
(``query()`` first: a batch that never waits): their stamps become seconds since their
own ``begin``, their events go back to the pool and their losses are stacked into one
tensor, so a 160K-iteration run holds about two thousand iterations' events, not a
million, and a run of up to 2048 iterations compacts nothing inside its window; the
rest are resolved in ``rows()`` after ``finish()``. The timed window runs from the start
of the first iteration after warm-up to the end of the last, device-synchronised at
both ends (the only synchronisations, besides counting FLOPs in warm-up iteration 0).

Communication comes in two ways: ``add_comm(seconds)`` (a trainer that timed it
itself) and ``comm_span(nbytes)`` (trainers.comm's DDP hook: one span per gradient
bucket, from the all-reduce's launch to its completion, stamped with the same clock
as the marks; trainers.comm_cpp's C++ hook hands its spans over through ``span_source``
once an iteration instead). Spans overlap the backward phase; see docs/breakdown.md for how the
figures relate. Optionally the model FLOPs of iteration 0 (a warm-up iteration,
outside the timed window) are counted (trainers.flops).
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Optional

import torch

from trainers.events import EVENTS_PER_ITERATION, EventClock
from trainers.stats import percentile, stats_row, union_length

PHASES = ("data", "forward", "backward", "step", "comm")
RESOLVE_EVERY = 1024  # CUDA: iterations between compactions of completed iterations' events
# Sequential phases: they tile an iteration (begin .. end), so they sum to iter_s.
SEQUENTIAL = ("data", "forward", "backward", "step")


class Recorder:
    """Timing of one rank's iterations (see module docstring)."""

    def __init__(self, device: torch.device, warmup: int, *, count_flops: bool = False,
                 resolve_every: Optional[int] = None, memory: Any = None, expected_iterations: int = 0):
        self.device = device
        # trainers.memory.PeakMemory: told when the window opens and closes, and sampled
        # at every compaction
        self.memory = memory
        self.warmup = warmup
        self.cuda = device.type == "cuda"
        self._it = -1
        self._marks: list[list[tuple[str, Any]]] = []  # per iteration: [(label, stamp)]
        self._loss: list[Optional[torch.Tensor | float]] = []
        self._images: list[int] = []
        self._extra_comm: list[float] = []  # comm seconds added by trainers (CPU clocks)
        self._spans: list[list[list]] = []  # per iteration: [start, end, nbytes] per all-reduce
        self._resolved: Optional[list[dict]] = None
        self.t_window0: Optional[float] = None
        self.t_window1: Optional[float] = None
        self.t_first: Optional[float] = None
        # Counting FLOPs slows the counted iteration, so only a warm-up one may be counted.
        self._count_flops = count_flops and warmup > 0
        self._flops: Any = None
        self.flops_per_iter: Optional[float] = None
        self.flops_kinds: Optional[dict[str, int]] = None  # the counted FLOPs by kind (trainers.flops)
        self.flops_error: Optional[str] = None
        self._cur: list[tuple[str, Any]] = []  # this iteration's marks (the hot path appends here)
        # Compaction (module docstring): off on CPU by default, where stamps are floats already.
        self.resolve_every = RESOLVE_EVERY if resolve_every is None and self.cuda else int(resolve_every or 0)
        self._compacted = 0  # iterations before this one are compacted
        # A run resumed from a checkpoint (trainers/checkpoint.py, load_state_dict): the
        # iterations before ``_offset`` are earlier attempts' (resolved, in ``_prior``),
        # their timed window ``_prior_wall`` seconds; ``_excluded``: time inside this
        # attempt's window spent outside iterations (saving checkpoints), not counted.
        self._offset = 0
        self._prior: list[dict] = []
        self._prior_wall = 0.0
        self._excluded = 0.0
        self._clock: Optional[EventClock] = None
        self._host_loss = not self.cuda  # losses read at once (end), not kept as tensors
        # A callable returning the all-reduce spans completed since its last call, as
        # [start, end, nbytes] lists on this clock (trainers.comm_cpp: the C++ hook's log),
        # taken into the iteration that launched them; None: spans come by comm_span.
        self.span_source: Any = None
        if self.cuda:  # events for the iterations it will hold at most (trainers/events.py)
            held = min(int(expected_iterations), 2 * self.resolve_every if self.resolve_every else expected_iterations)
            self._clock = EventClock(device, prefill=held * EVENTS_PER_ITERATION)
            self._mark, self.stamp = self._clock.mark, self._clock.stamp  # type: ignore[method-assign]
        else:  # the hot path: a plain function, no method dispatch
            self._mark = self.stamp = time.perf_counter  # type: ignore[method-assign]

    def stamp(self) -> Any:
        """A time stamp on this rank's clock: a recorded CUDA event (on the current
        stream), or ``perf_counter``; set per instance in ``__init__``."""
        raise NotImplementedError

    # ---------------------------------------------------------------- loop API
    def begin(self) -> None:
        if self.span_source is not None:
            self.take_spans()  # the iteration before launched them and waited for them all
        self._it += 1
        if self._it == 0:
            self.t_first = time.perf_counter()
            if self._count_flops:
                self._start_flops()
        if self._it == max(self.warmup, self._offset):  # the window opens (again, in a resumed run)
            if self.cuda:
                torch.cuda.synchronize(self.device)
            if self.memory is not None:
                self.memory.window_start()
            self.t_window0 = time.perf_counter()
        n = self._it - self._offset  # this attempt's iterations so far: the lists' index
        if self.resolve_every and n % self.resolve_every == 0 and n >= 2 * self.resolve_every:
            self._compact(n - self.resolve_every)
        if self._clock is not None:
            self._clock.begin_iteration()
        self._cur = [("begin", self._mark())]
        self._marks.append(self._cur)
        self._loss.append(None)
        self._images.append(0)
        self._extra_comm.append(0.0)
        self._spans.append([])
        self._resolved = None

    def mark(self, phase: str) -> None:
        self._cur.append((phase, self._mark()))

    def add_comm(self, seconds: float) -> None:
        """Communication time measured elsewhere (e.g. a DDP comm hook) for this iteration."""
        if self._extra_comm:
            self._extra_comm[-1] += seconds

    def comm_span(self, nbytes: int) -> list:
        """Open a communication span of ``nbytes`` now; the caller stores the end stamp
        (``span[1] = rec.stamp()``) when the collective completes. Thread-safe enough:
        list appends and item stores are atomic under the GIL."""
        span = [self.stamp(), None, int(nbytes)]
        if self._spans:
            self._spans[-1].append(span)
        return span

    def take_spans(self) -> None:
        """Take the spans ``span_source`` holds into the current iteration (at its end or
        before the next begins: the iteration that launched them)."""
        new = self.span_source() if self.span_source is not None else None
        if new and self._spans:
            self._spans[-1].extend(new)
            self._resolved = None

    def end(self, loss: Optional[torch.Tensor | float] = None, images: int = 0) -> None:
        self._cur.append(("end", self._mark()))
        if isinstance(loss, torch.Tensor):
            # On CPU the value is there already: a float now is cheaper than a detached
            # tensor (0.3 vs 1.4 us) and holds no tensor; on CUDA reading it would wait.
            if self._host_loss and loss.is_cpu:
                try:
                    loss = loss.item()
                except RuntimeError:  # not one value
                    loss = loss.detach()
            else:
                loss = loss.detach()
        self._loss[-1] = loss
        self._images[-1] = images
        if self._it == 0 and self._flops is not None:
            self._stop_flops()

    def finish(self) -> None:
        if self._flops is not None:  # iteration 0 never ended
            self._stop_flops()
        if self.cuda:
            torch.cuda.synchronize(self.device)
        self.t_window1 = time.perf_counter()
        if self.memory is not None:
            self.memory.finish()
        if self.t_window0 is None:  # no timed iteration (all warm-up)
            self.t_window0 = self.t_window1

    @property
    def iterations_done(self) -> int:
        return self._it + 1

    # ---------------------------------------------------------------- checkpoint (trainers/checkpoint.py)
    def exclude(self, seconds: float) -> None:
        """Time spent inside the open window outside any iteration (a checkpoint being
        saved): not training time, taken off the window."""
        if self.t_window0 is not None and self.t_window1 is None:
            self._excluded += seconds

    def window_s(self) -> float:
        """The timed window so far (earlier attempts' included, exclusions taken off);
        at an iteration boundary (device-synchronised)."""
        if self.t_window0 is None:
            return self._prior_wall
        if self.cuda and self.t_window1 is None:
            torch.cuda.synchronize(self.device)
        end = self.t_window1 if self.t_window1 is not None else time.perf_counter()
        return self._prior_wall + (end - self.t_window0) - self._excluded

    def state_dict(self) -> dict:
        """Every iteration so far, resolved, and the window's time: what a resumed attempt
        continues from (plain Python: floats, lists, dicts). At an iteration boundary."""
        if self.cuda:
            torch.cuda.synchronize(self.device)  # every event of the iterations so far has completed
        resolved = [{k: v for k, v in d.items() if k != "local"} for d in self._resolve()]
        for d, row in zip(resolved, self.rows()):
            d["loss"] = row["loss"]
        return {"iterations": self.iterations_done, "resolved": resolved, "wall_s": self.window_s(),
                "flops_per_iter": self.flops_per_iter, "flops_kinds": self.flops_kinds, "flops_error": self.flops_error}

    def load_state_dict(self, state: dict) -> None:
        """Continue the run ``state`` (``state_dict``) describes, before the first ``begin``:
        the next iteration is ``state["iterations"]``."""
        self._offset = int(state["iterations"])
        self._it = self._offset - 1
        self._prior = [dict(d, local=None) for d in state["resolved"]]
        self._prior_wall = float(state["wall_s"] or 0.0)
        self.flops_per_iter, self.flops_kinds = state.get("flops_per_iter"), state.get("flops_kinds")
        self.flops_error = state.get("flops_error")
        self._count_flops = False

    def iteration_seconds(self, start: int = 0) -> list[float]:
        """Seconds of iterations ``start``, ``start + 1``, ... that have ended and whose
        clocks have completed, in order, up to the first that has not (on CUDA a
        ``query()``: never a wait). For a sampled run's decisions (trainers/sampling.py)."""
        out = []
        for marks in self._marks[start:]:
            if marks[-1][0] != "end" or not self._done(marks[-1][1]):
                break
            out.append(self._elapsed(marks[0][1], marks[-1][1]))
        return out

    # ---------------------------------------------------------------- FLOPs of iteration 0
    def _start_flops(self) -> None:
        try:
            from trainers.flops import IterationFlops

            self._flops = IterationFlops()
            self._flops.start()
        except Exception as exc:  # counting must never break a run
            self._flops, self.flops_error = None, f"{type(exc).__name__}: {exc}"

    def _stop_flops(self) -> None:
        counter, self._flops = self._flops, None
        try:
            total = counter.stop()
            self.flops_per_iter = float(total) if total else None
            self.flops_kinds = getattr(counter, "by_kind", None)
            if not total:
                self.flops_error = "no FLOP-counted operator ran (no matmul/convolution/attention)"
        except Exception as exc:
            self.flops_error = f"{type(exc).__name__}: {exc}"

    # ---------------------------------------------------------------- results
    def _elapsed(self, a: Any, b: Any) -> float:
        if isinstance(a, float):  # CPU clocks, or a compacted iteration
            return b - a
        return a.elapsed_time(b) / 1000.0

    @staticmethod
    def _done(stamp: Any) -> bool:
        return isinstance(stamp, float) or stamp.query()

    def _compact(self, upto: int) -> None:
        """Compact iterations [self._compacted, upto) whose events have all completed
        (stopping at the first that has not): stamps -> seconds since the iteration's
        begin, the spans without a completion dropped (as ``_resolve`` would), losses
        stacked into one tensor (an asynchronous kernel, no synchronize)."""
        if self.memory is not None:
            self.memory.sample()
        i0 = i = self._compacted
        while i < upto:
            marks = self._marks[i]
            spans = [sp for sp in self._spans[i] if sp[1] is not None]
            if not all(self._done(st) for st in (marks[-1][1], *(sp[1] for sp in spans))):
                break
            b = marks[0][1]
            self._marks[i] = [(label, 0.0 if st is b else self._elapsed(b, st)) for label, st in marks]
            self._spans[i] = [[self._elapsed(b, sp[0]), self._elapsed(b, sp[1]), sp[2]] for sp in spans]
            if self._clock is not None:  # their times are read: reuse them
                self._clock.release([st for _, st in marks] + [sp[0] for sp in spans] + [sp[1] for sp in spans])
            i += 1
        self._compacted = i
        held = [k for k in range(i0, i) if isinstance(self._loss[k], torch.Tensor) and self._loss[k].numel() == 1]
        devices = {self._loss[k].device for k in held}
        if held and len(devices) == 1:  # (losses on several devices stay as they are)
            chunk = [torch.stack([self._loss[k].reshape(()).float() for k in held])]  # the tensor, later its list
            for n, k in enumerate(held):
                self._loss[k] = (chunk, n)

    def _loss_value(self, i: int) -> Optional[float]:
        loss = self._loss[i]
        if isinstance(loss, tuple):  # in a stacked chunk: one copy to the host per chunk
            chunk, n = loss
            if isinstance(chunk[0], torch.Tensor):
                chunk[0] = chunk[0].tolist()
            return float(chunk[0][n])
        return float(loss) if loss is not None else None

    def _resolve(self) -> list[dict]:
        """Per iteration: phase seconds and the all-reduce spans' figures (cached)."""
        if self.span_source is not None:
            self.take_spans()
        if self._resolved is not None:
            return self._resolved
        out = list(self._prior)
        for i, marks in enumerate(self._marks):
            if marks[-1][0] != "end":
                continue  # an interrupted iteration
            phases: dict[str, float] = {}
            for (_, a), (label, b) in zip(marks, marks[1:]):
                if label in PHASES:
                    phases[label] = phases.get(label, 0.0) + self._elapsed(a, b)
            it = self._offset + i
            d: dict[str, Any] = {"iter": it, "warmup": it < self.warmup, "local": i, "images": self._images[i],
                                 "iter_s": self._elapsed(marks[0][1], marks[-1][1]), "phases": phases,
                                 "extra_comm_s": self._extra_comm[i], "allreduce": None}
            spans = [s for s in self._spans[i] if s[1] is not None]
            if spans:
                t0 = marks[0][1]
                iv = [(self._elapsed(t0, s[0]), self._elapsed(t0, s[1])) for s in spans]
                last_start = max(s for s, _ in iv)
                last_end = max(e for _, e in iv)
                d["allreduce"] = {
                    "busy_s": union_length(iv),  # time at least one bucket's all-reduce was in flight
                    "span_s": last_end - min(s for s, _ in iv),
                    # from the last bucket's launch (all gradients computed) to the last completion
                    "exposed_s": max(last_end - last_start, 0.0),
                    "bytes": sum(s[2] for s in spans),
                    "buckets": len(spans),
                }
            out.append(d)
        self._resolved = out
        return out

    def rows(self) -> list[dict]:
        """One dict per iteration (iteration table columns): iter, warmup, iter_s, loss and
        phase seconds; ``comm_s`` = a marked comm phase + add_comm() + all-reduce in flight."""
        out = []
        for d in self._resolve():
            i, phases = d["iter"], d["phases"]
            row: dict[str, Any] = {"iter": i, "warmup": d["warmup"], "iter_s": d["iter_s"]}
            comm = phases.get("comm")
            if d["extra_comm_s"]:
                comm = (comm or 0.0) + d["extra_comm_s"]
            if d["allreduce"] is not None:
                comm = (comm or 0.0) + d["allreduce"]["busy_s"]
            for p in SEQUENTIAL:
                row[f"{p}_s"] = phases.get(p)  # never marked: absent (None), not zero
            row["comm_s"] = comm
            row["loss"] = d["loss"] if d["local"] is None else self._loss_value(d["local"])
            out.append(row)
        return out

    def allreduce_rows(self, timed_only: bool = True) -> list[dict]:
        """Per iteration with all-reduce spans: iter, busy_s, span_s, exposed_s, bytes, buckets."""
        return [dict(d["allreduce"], iter=d["iter"]) for d in self._resolve()
                if d["allreduce"] is not None and not (timed_only and d["warmup"])]

    def summary(self, rows: Optional[list[dict]] = None) -> dict:
        """The rank's timed-window summary (rank_timing columns)."""
        rows = self.rows() if rows is None else rows
        timed = [r for r in rows if not r["warmup"]]
        warm = [r for r in rows if r["warmup"]]
        iters = [r["iter_s"] for r in timed]
        images = sum(d["images"] for d in self._resolve() if not d["warmup"])
        wall = self.window_s() if timed else 0.0

        def total(col: str) -> Optional[float]:
            vals = [r[col] for r in timed if r[col] is not None]
            return sum(vals) if vals else None

        compute_parts = [total(c) for c in ("forward_s", "backward_s", "step_s")]
        compute = sum(v for v in compute_parts if v is not None) if any(v is not None for v in compute_parts) else None
        losses = [r["loss"] for r in rows if r["loss"] is not None]
        return {
            "warmup_iterations": len(warm),
            "warmup_s": sum(r["iter_s"] for r in warm) if warm else 0.0,
            "iterations": len(timed),
            "wall_s": wall,
            "iter_mean_s": statistics.fmean(iters) if iters else None,
            "iter_median_s": statistics.median(iters) if iters else None,
            "iter_p95_s": percentile(iters, 95) if iters else None,
            "images": images,
            "images_per_s": images / wall if wall > 0 else None,
            "final_loss": losses[-1] if losses else None,
            "data_wait_s": total("data_s"),
            "compute_s": compute,
            "comm_s": total("comm_s"),
        }

    def breakdown_rows(self, rows: Optional[list[dict]] = None) -> list[dict]:
        """``breakdown`` rows over the timed iterations (docs/breakdown.md): the sequential
        phases, ``comm``, ``comm_marked``, ``comm_exposed``, ``backward_compute``, ``iteration``."""
        rows = self.rows() if rows is None else rows
        timed = [r for r in rows if not r["warmup"]]
        out = []
        for p in SEQUENTIAL + ("comm",):
            vals = [r[f"{p}_s"] for r in timed if r[f"{p}_s"] is not None]
            if vals:
                out.append(stats_row(p, vals))
        marked = [d["phases"]["comm"] for d in self._resolve() if not d["warmup"] and "comm" in d["phases"]]
        if marked:  # a sequential comm phase the trainer marks (it sums with the four above)
            out.append(stats_row("comm_marked", marked))
        ar = {a["iter"]: a for a in self.allreduce_rows()}
        if ar:
            out.append(stats_row("comm_exposed", [a["exposed_s"] for a in ar.values()]))
            bwd = [max(r["backward_s"] - ar[r["iter"]]["exposed_s"], 0.0) for r in timed
                   if r["iter"] in ar and r["backward_s"] is not None]
            if bwd:
                out.append(stats_row("backward_compute", bwd))
        if timed:
            out.append(stats_row("iteration", [r["iter_s"] for r in timed]))
        return out
