"""Checkpoints of a long run (``experiment.checkpoint=true``) that survive preemption and
time limits.

Each rank saves, at an iteration boundary (never inside the timed iterations), its own
file ``<job folder>/checkpoints/p<point>-r<rank>-i<iteration>.pt``: the model's and the
optimizer's state, the torch RNG, the iteration reached (which is the trainer's data
position: its ``resume_at(iteration)``), the trainer's own state beyond those when it
has any (its ``state_dict()``/``load_state_dict()``: an LR schedule, a loss scaler;
plain values and tensors only), and the Recorder's accumulated timings
(``Recorder.state_dict``: every iteration so far and the timed window's seconds). It
saves

- on the preemption signal (SLURM's ``--signal=USR2@90`` before the time limit, a
  preemption's, ``scancel --signal=USR2``, or a local job's controller's): the handler
  only raises a flag; at the next iteration boundary the ranks agree (one small
  all-reduce per iteration on a gloo group: checkpointing runs are not timing runs),
  save, and raise ``Requeue``; rank 0 records its attempt ``requeued`` and hands over to
  submitit's own handler, which requeues the job (``Checkpointable``, campaign's
  ``CheckpointingJobEntry``; ``scontrol requeue`` on SLURM, the controller's restart
  locally) and ends it;
- every ``experiment.checkpoint_every`` iterations, for a job that dies without a signal
  (a node failure): its next attempt (a requeue, ``campaign resume``, a retry) resumes
  from the last one, and the iterations after it are run (and timed) again.

A new attempt resumes from the newest iteration every rank has a file of, when it was
made by the same run (its fingerprint: trainer, dataset, schedule, world size): the
timed rows of all its attempts form one run, written by the attempt that completes it.
Each attempt is a *segment* of that run (which iterations it ran, the gap before it:
from the checkpoint to the resumed first iteration, never counted as training time);
the segments go into ``rank_timing.extra["checkpoint"]``. Saving time is taken off
the timed window too. A resumed attempt does not warm up again: its first iterations
are timed as they come. Files are removed once the run completes.

The flag is raised from the rank's first moment (trainers/preempt.py): a job signalled
while it starts stops at its first iteration boundary. One signalled after its last
boundary completes (its results are being written).

Test knob: ``CAMPAIGN_INJECT_AWAIT_SIGNAL_AT=N`` makes each rank of a run's first
attempt (not a resumed one) wait after iteration N (outside the timed window, at most
``AWAIT_MAX_S``) until it has the signal, so that a test signals a run that is
certainly mid-way however slow the machine: it stops at N + 1 at the latest.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import time
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from trainers.preempt import preempt_signal, take_over

FORMAT = 1
AWAIT_ENV = "CAMPAIGN_INJECT_AWAIT_SIGNAL_AT"  # test knob (module docstring)
AWAIT_MAX_S = 600.0


class Requeue(Exception):
    """The ranks checkpointed on the preemption signal; the job is to be requeued."""

    def __init__(self, iteration: int, total: int, signame: str):
        self.iteration = iteration
        super().__init__(f"checkpointed at iteration {iteration} of {total} on {signame} (preemption or time "
                         "limit); requeued")


def fingerprint(spec: Any, world_size: int) -> str:
    """What makes a checkpoint this run's: trainer, dataset, schedule and world size.
    ``spec``: the job's spec (campaign/backends/job_spec.py's ``JobSpec``)."""
    cfg = spec.config
    what = {"trainer": cfg["trainer"], "dataset": cfg["dataset"], "plan": spec.plan, "world_size": world_size}
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()[:16]


class Checkpointer:
    """One rank's checkpoints (module docstring). Every rank makes one, at the same point:
    its control group is a collective. ``spec``: the job's ``JobSpec``."""

    def __init__(self, ctx: Any, spec: Any, total: int, *, every: int = 0, attempt_no: int = 0):
        self.ctx = ctx
        self.total = int(total)
        self.every = int(every or 0)
        self.attempt_no = int(attempt_no)
        self.folder = Path(spec.checkpoint_dir)
        self.prefix = f"p{spec.point_id}-r{ctx.rank}-i"
        self.fingerprint = fingerprint(spec, ctx.world_size)
        self.signalled: Optional[str] = None
        self._previous: Any = None  # submitit's handler: it requeues the job
        self._group = None
        if ctx.distributed:
            import torch.distributed as dist

            # agreement and barriers on CPU tensors, whatever the training's backend
            self._group = dist.new_group(backend="gloo") if ctx.backend != "gloo" else dist.group.WORLD
        self.segments: list[dict] = [{"attempt": self.attempt_no, "first_iter": 0, "gap_before_s": None}]
        self.save_s = 0.0  # time spent saving, over every attempt
        self.resumed_from: Optional[int] = None
        self.prior_peak: Optional[float] = None  # the timed window's peak memory in earlier attempts
        self._wall_at_start = 0.0
        self._await_at = int(os.environ.get(AWAIT_ENV) or 0)

    # ------------------------------------------------------------------ signal
    def install(self) -> None:
        """Raise the flag on the preemption signal (submitit's handler is kept to requeue);
        a signal caught since the rank started (``preempt.catch``) raises it now."""
        self._previous, early = take_over(self._on_signal)
        if early is not None and self.signalled is None:
            self.signalled = early

    def _on_signal(self, signum: int, _frame: Any) -> None:
        self.signalled = signal.Signals(signum).name

    def _agree(self, mine: bool) -> bool:
        if self._group is None:
            return mine
        import torch.distributed as dist

        flag = torch.tensor([1 if mine else 0], dtype=torch.int32)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self._group)
        return bool(flag.item())

    def _barrier(self) -> None:
        if self._group is not None:
            import torch.distributed as dist

            dist.barrier(group=self._group)

    # ------------------------------------------------------------------ the loop's hook
    def between(self, done: int, trainer: Any, rec: Any) -> None:
        """After iteration ``done`` (1-based count): save when due or signalled; on the
        signal, raise ``Requeue`` (every rank at the same iteration)."""
        if done >= self.total:
            return
        stop = self._agree(self.signalled is not None)
        if stop or (self.every and done % self.every == 0):
            self.save(done, trainer, rec)
        if stop:
            raise Requeue(done, self.total, self.signalled or "the preemption signal")
        if done == self._await_at and self.resumed_from is None:
            self._await_signal(rec)

    def _await_signal(self, rec: Any) -> None:
        """The test knob (module docstring): wait until signalled, not as training time."""
        t0 = time.perf_counter()
        while self.signalled is None and time.perf_counter() - t0 < AWAIT_MAX_S:
            time.sleep(0.05)  # the signal's handler runs between two sleeps
        rec.exclude(time.perf_counter() - t0)

    def hook(self, trainer: Any, rec: Any) -> Callable[[int], None]:
        """``between`` for ``trainers.loop.train``."""
        return lambda done: self.between(done, trainer, rec)

    # ------------------------------------------------------------------ save / load
    def _path(self, iteration: int) -> Path:
        return self.folder / f"{self.prefix}{iteration}.pt"

    def _mine(self) -> dict[int, Path]:
        out = {}
        for path in self.folder.glob(f"{self.prefix}*.pt") if self.folder.is_dir() else ():
            tail = path.name[len(self.prefix):-3]
            if tail.isdigit():
                out[int(tail)] = path
        return out

    def save(self, done: int, trainer: Any, rec: Any) -> None:
        """Every rank writes its file for iteration ``done`` (atomically), waits for the
        others, then removes its older ones."""
        t0 = time.perf_counter()
        self.folder.mkdir(parents=True, exist_ok=True)
        timings = rec.state_dict()
        segments = [dict(s) for s in self.segments]
        segments[-1].update(end_iter=done, wall_s=timings["wall_s"] - self._wall_at_start)
        model, optimizer = getattr(trainer, "model", None), getattr(trainer, "optimizer", None)
        state = {
            "format": FORMAT, "fingerprint": self.fingerprint, "iteration": done, "attempt_no": self.attempt_no,
            "saved_at": time.time(), "model": model.state_dict() if isinstance(model, torch.nn.Module) else None,
            "optimizer": optimizer.state_dict() if optimizer is not None and hasattr(optimizer, "state_dict") else None,
            "rng": torch.get_rng_state(), "recorder": timings, "segments": segments,
            "trainer": trainer.state_dict() if hasattr(trainer, "state_dict") else None,
            "save_s": self.save_s + (time.perf_counter() - t0), "peak_memory_bytes": getattr(getattr(rec, "memory", None), "window_bytes", None),
        }
        tmp = self._path(done).with_suffix(".tmp")
        torch.save(state, tmp)
        os.replace(tmp, self._path(done))
        self._barrier()
        for iteration, path in self._mine().items():
            if iteration != done:
                path.unlink(missing_ok=True)
        spent = time.perf_counter() - t0
        self.save_s += spent
        rec.exclude(spent)

    def load(self, trainer: Any, rec: Any) -> Optional[int]:
        """Resume from the newest checkpoint every rank has (of this run); returns its
        iteration, or None to start afresh. Collective."""
        mine = self._mine()
        every = [sorted(mine)]
        if self._group is not None:
            import torch.distributed as dist

            every = [None] * self.ctx.world_size
            dist.all_gather_object(every, sorted(mine), group=self._group)
        common = set(every[0]).intersection(*every[1:]) if every else set()
        for iteration in sorted(common, reverse=True):
            state = torch.load(mine[iteration], map_location=self.ctx.device, weights_only=True)
            ok = state.get("format") == FORMAT and state.get("fingerprint") == self.fingerprint
            if self._agree(not ok):  # one rank's file is another run's: start afresh, all of us
                return None
            self._restore(state, trainer, rec)
            return iteration
        return None

    def _restore(self, state: dict, trainer: Any, rec: Any) -> None:
        model, optimizer = getattr(trainer, "model", None), getattr(trainer, "optimizer", None)
        if state["model"] is not None and isinstance(model, torch.nn.Module):
            model.load_state_dict(state["model"])
        if state["optimizer"] is not None and optimizer is not None:
            optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["rng"].cpu())
        if state.get("trainer") is not None:  # before resume_at: it may read the restored state
            trainer.load_state_dict(state["trainer"])
        trainer.resume_at(state["iteration"])
        rec.load_state_dict(state["recorder"])
        self.resumed_from = int(state["iteration"])
        self.save_s = float(state.get("save_s") or 0.0)
        self.prior_peak = state.get("peak_memory_bytes")
        self._wall_at_start = rec.window_s()
        self.segments = list(state["segments"]) + [{
            "attempt": self.attempt_no, "first_iter": self.resumed_from,
            "gap_before_s": max(0.0, time.time() - float(state["saved_at"]))}]

    # ------------------------------------------------------------------ the end
    def summary(self, rec: Any) -> dict:
        """``rank_timing.extra["checkpoint"]`` of the completed run: its segments, how often it
        resumed, the gaps between its attempts and the time spent saving (none of it in
        ``wall_s``)."""
        segments = [dict(s) for s in self.segments]
        segments[-1].update(end_iter=self.total, wall_s=rec.window_s() - self._wall_at_start)
        gaps = [s["gap_before_s"] for s in segments if s.get("gap_before_s") is not None]
        return {"segments": segments, "resumed": len(segments) - 1, "gap_s": sum(gaps), "save_s": self.save_s}

    def remove(self) -> None:
        """The run completed: its checkpoint files go."""
        for path in self._mine().values():
            path.unlink(missing_ok=True)

    def requeue(self) -> None:
        """Rank 0, after ``Requeue``: submitit's own handler requeues the job and ends this
        process (``SystemExit``); raises if there is none (not a submitit job)."""
        handler = self._previous
        if not callable(handler):
            raise RuntimeError("checkpointed, but this is not a submitit job: nothing can requeue it")
        # On SLURM the handler runs `scontrol requeue`, and the controller ends the job at once:
        # its SIGTERM reaches every process of the job, the scontrol that asked too, which under
        # load died of it before returning (CalledProcessError -15: a requeue that happened,
        # stored as a failure). An ignored signal stays ignored across exec, so that scontrol
        # ignores it; this process, which ends here, ignored it already (submitit's tasks bypass
        # SIGTERM; the local backend stops them with SIGINT).
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        handler(preempt_signal(), None)
