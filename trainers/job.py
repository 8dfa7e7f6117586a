"""What every rank of a campaign job runs: set up, train, measure, write rows."""

from __future__ import annotations

import gc
import os
import platform as _platform
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any

import torch

from trainers import comm, dist, heartbeat, loop, registry, sampling
from trainers.checkpoint import Checkpointer, Requeue
from trainers.flops import math_mode, mfu_extra
from trainers.instrument import Recorder
from trainers.memory import PeakMemory
from trainers.orphan import ControllerGone, end_rank, watch_controller
from trainers.startup import startup_s
from trainers.writer import JobWriter


def _provenance(ctx: dist.DistContext, spec: Any) -> dict[str, Any]:
    cuda = torch.cuda.is_available()
    return {
        "host": ctx.host,
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if cuda else None,
        "device": torch.cuda.get_device_name(ctx.device) if ctx.device.type == "cuda" else _platform.processor() or "cpu",
        "device_type": ctx.device.type,
        "emulated_gpus": ctx.emulated,
        "backend": ctx.backend,
        "world_size": ctx.world_size,
        "nodes": ctx.num_nodes,
        # where SLURM put every rank (SLURMD_NODENAME, by rank) and where they met
        "rank_nodes": list(ctx.rank_nodes),
        "master": ctx.master or None,
        "threads_per_rank": torch.get_num_threads(),
        "job_id": os.environ.get("SLURM_JOB_ID") or os.environ.get("SUBMITIT_LOCAL_JOB_ID"),
        "slurm_nodelist": os.environ.get("SLURM_JOB_NODELIST"),
        "container": spec.container,
        "config": spec.config,
    }


def threads_per_rank(requested: int | None, ranks_on_node: int, cores: int) -> int:
    """Intra-op threads of one rank: what the scheduler granted (cpus_per_task), but never
    more than this node's cores shared by its ranks, so ranks do not oversubscribe cores
    (an emulated test node advertises more CPUs than it has)."""
    fair = max(1, cores // max(1, ranks_on_node))
    return max(1, min(requested, fair)) if requested and requested > 0 else fair


def _set_threads(requested: int | None, ranks_on_node: int) -> None:
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    n = threads_per_rank(requested, ranks_on_node, cores)
    torch.set_num_threads(n)
    os.environ["OMP_NUM_THREADS"] = str(n)


def _grad_element_size(trainer) -> int:
    model = getattr(trainer, "model", None)
    params = model.parameters() if isinstance(model, torch.nn.Module) else ()
    return next((p.element_size() for p in params if p.requires_grad), 4)


def _rank_extra(trainer, cfg: dict, ctx: dist.DistContext, rec: Recorder, summary: dict, *,
                comm_source: str | None, flops_source: str | None, memory: PeakMemory) -> dict[str, Any]:
    """rank_timing.extra (docs/breakdown.md): comm bytes and bandwidth, MFU, memory kind,
    injected delays; then the trainer's own ``summary_extra()``, which wins on a clash."""
    ipe_images = int(getattr(trainer, "images_per_step", 0) or 0) * max(ctx.world_size, 1)
    dataset_size = comm.dataset_size_of(trainer)
    extra: dict[str, Any] = {"comm_source": comm_source, **memory.extra()}
    extra.update(comm.sync_volume_extra(
        trainable_params=summary.get("trainable_params"), bytes_per_element=_grad_element_size(trainer),
        dataset_size=dataset_size, images_per_iter=ipe_images, world_size=ctx.world_size))
    extra.update(comm.allreduce_extra(
        rec.allreduce_rows(), world_size=ctx.world_size,
        interconnect_gbs=cfg["platform"].get("interconnect_bandwidth_gbs"),
        iterations_per_epoch=dataset_size / ipe_images if dataset_size and ipe_images else None))
    extra.update(mfu_extra(cfg, flops_per_iter=summary.get("flops_per_iter"), flops_source=flops_source,
                           iterations=summary["iterations"], wall_s=summary["wall_s"], flops_note=rec.flops_error,
                           devices=len(getattr(trainer, "devices", None) or ()), math=math_mode(trainer, ctx.device),
                           flops_kinds=rec.flops_kinds if flops_source == "flop_counter" else None))
    for knob in ("inject_data_delay_s", "inject_comm_delay_s"):
        if getattr(trainer, knob, None):
            extra[knob] = float(getattr(trainer, knob))
    if hasattr(trainer, "summary_extra"):
        extra.update(trainer.summary_extra() or {})
    return extra


def _breakdown(rec: Recorder, rows: list[dict], trainer) -> list[dict]:
    """The Recorder's per-phase rows merged with the trainer's own (the trainer's win on a name)."""
    own = list(getattr(trainer, "breakdown_rows", lambda: [])() or [])
    names = {r["phase"] for r in own}
    return [r for r in rec.breakdown_rows(rows) if r["phase"] not in names] + own


def trace_path(rank: int) -> Path:
    """Where this rank's profiler trace goes: beside the job's logs, as
    ``<job id>_<rank>_trace.json.gz`` in submitit's job folder (outside a submitit job:
    the temp folder)."""
    try:
        import submitit

        env = submitit.JobEnvironment()
        return Path(env.paths.folder) / f"{env.job_id}_{rank}_trace.json.gz"
    except Exception:  # not a submitit job (a direct call, a test)
        return Path(tempfile.gettempdir()) / f"campaign-{os.getpid()}_{rank}_trace.json.gz"


def profile_warning(ctx: dist.DistContext, mine: str | None) -> str | None:
    """Every rank's profiler warning, gathered (a collective: every rank calls it): the
    point's one-line reason, naming the ranks, or None when none had any."""
    every = [mine]
    if ctx.distributed:
        every = [None] * ctx.world_size
        torch.distributed.all_gather_object(every, mine)
    bad = [(rank, w) for rank, w in enumerate(every) if w]
    if not bad:
        return None
    ranks = ",".join(str(r) for r, _ in bad)
    return f"warning: rank{'s' if len(bad) > 1 else ''} {ranks}: {bad[0][1]} (timing rows kept, no profile figures)"


def _checkpointer(ctx: dist.DistContext, spec: Any, attempt: Any) -> "Checkpointer | None":
    """The point's checkpointer (experiment.checkpoint=true, trainers/checkpoint.py), its
    signal handler installed; None for a timing run."""
    exp = spec.config["experiment"]
    if not exp.get("checkpoint") or not spec.checkpoint_dir:
        return None
    plan = spec.plan
    ckpt = Checkpointer(ctx, spec, plan["warmup"] + plan["iterations"], every=int(exp.get("checkpoint_every") or 0),
                        attempt_no=attempt[1] if attempt is not None else 0)
    ckpt.install()
    return ckpt


def run_point(spec: Any) -> dict:
    """Entry of one rank. ``spec``: the job's ``JobSpec`` (campaign/backends/job_spec.py),
    its version already checked by the entry that calls this; the job side reads its
    fields without importing campaign."""
    try:
        watch_controller()  # a local rank whose controller is killed fails (never completes unwatched)
    except ControllerGone as gone:  # nothing started yet: nothing to report (the host reads the log)
        end_rank(gone)
    _set_threads(spec.threads_per_rank, int(spec.tasks_per_node or 1))
    cfg, plan = spec.config, spec.plan
    ctx = dist.setup(want_device=cfg["platform"]["device"],
                     timeout_s=60.0 * float(cfg["platform"].get("dist_timeout_min") or 10.0),
                     shared_devices=registry.shares_devices(cfg["trainer"]))
    writer = JobWriter(spec.store_url, busy_timeout_s=spec.busy_timeout_s)
    attempt_id, orphaned = None, None
    job_id = os.environ.get("SLURM_JOB_ID") or os.environ.get("SUBMITIT_LOCAL_JOB_ID") or str(os.getpid())
    if os.environ.get("SLURM_ARRAY_JOB_ID"):
        job_id = f"{os.environ['SLURM_ARRAY_JOB_ID']}_{os.environ.get('SLURM_ARRAY_TASK_ID')}"
    try:
        if ctx.rank == 0:
            attempt_id = writer.start_attempt(
                spec.point_id, job_id=job_id, world_size=ctx.world_size, provenance=_provenance(ctx, spec),
                attempt_base=spec.attempt_base,
            )
        attempt_id = dist.broadcast_object(ctx, attempt_id)
        ckpt = _checkpointer(ctx, spec, attempt_id)
        trainer = registry.get(cfg["trainer"])(ctx, cfg, plan)
        own_flops = getattr(trainer, "flops_per_iter", None)
        memory = PeakMemory(ctx.device)  # the window's peak and the warm-up's (trainers/memory.py)
        # FLOPs counted in warm-up iteration 0 unless the trainer states them (trainers.flops).
        rec = Recorder(ctx.device, warmup=plan["warmup"], count_flops=not own_flops, memory=memory,
                       expected_iterations=plan["warmup"] + plan["iterations"])
        hook_extra: dict[str, Any] = {}
        if cfg["experiment"].get("time_comm", True):
            timer, comm_source, hook_extra = comm.attach(
                trainer, rec, inject_delay_s=getattr(trainer, "inject_comm_delay_s", 0.0),
                hook=str(cfg["experiment"].get("comm_hook") or "auto"))
        else:  # DDP's own C++ all-reduce, untimed
            timer, comm_source = None, "off"
        memory.start()
        if ckpt is not None:
            ckpt.load(trainer, rec)  # a resumed run continues where its checkpoint stands
        # A sampled run with a target half-width: the data chooses its window (trainers/sampling.py);
        # launch refuses one with checkpoints (a sample is short, and its window is decided live).
        rule = sampling.SampleRule.from_plan(plan) if not hasattr(trainer, "run") and ckpt is None else None
        sampler = sampling.WindowSampler(rule, rec, sampling.agreement(ctx)) if rule else None
        # progress rows for campaign status, from a thread that reads the loop's counter
        # (trainers/heartbeat.py: nothing in the loop, no device synchronisation)
        beat = heartbeat.start(writer, attempt_id, ctx.rank, total=plan["warmup"] + plan["iterations"],
                               warmup=plan["warmup"], counter=lambda: rec.iterations_done,
                               interval_s=cfg["store"].get("heartbeat_s"))
        # Start-up ran without the collector (campaign/backends/entry.py): what it made stays
        # for the run, so it leaves the collector's generations (gc.freeze) and the timed
        # iterations' collections walk only what the loop allocates.
        gc.freeze()
        gc.enable()
        frozen = gc.get_freeze_count()
        try:
            if sampler is not None:
                sampler.run(trainer)
            else:
                loop.train(trainer, rec, plan["warmup"] + plan["iterations"], ckpt.hook(trainer, rec) if ckpt else None)
        finally:
            beat.stop()
        rows = rec.rows()
        summary = rec.summary(rows)
        flops = own_flops or rec.flops_per_iter
        summary.update(
            host=ctx.node or ctx.host,  # the node SLURM put this rank on (n1, n2 on the local test cluster)
            device=str(ctx.device),
            trainable_params=int(getattr(trainer, "trainable_params", 0)) or None,
            flops_per_iter=float(flops) if flops else None,
            peak_memory_bytes=memory.window_bytes,
        )
        summary["extra"] = _rank_extra(trainer, cfg, ctx, rec, summary, comm_source=comm_source,
                                       flops_source="trainer" if own_flops else "flop_counter",
                                       memory=memory)
        summary["extra"].update(hook_extra)
        if ckpt is not None:
            summary["extra"]["checkpoint"] = ckpt.summary(rec)
            if ckpt.prior_peak is not None and summary["peak_memory_bytes"] is not None:
                summary["peak_memory_bytes"] = max(summary["peak_memory_bytes"], ckpt.prior_peak)
        summary["extra"]["startup_s"] = startup_s(rec.t_first)  # paid by every run: harvest's GPU-hours
        summary["extra"]["gc_frozen_objects"] = frozen  # start-up's objects, outside the collector's passes
        if sampler is not None:
            summary["extra"].update(sampler.extra(rows))
        # The timing rows are stored before the profiler window starts: nothing the
        # profiler does can lose them.
        writer.write_rank(attempt_id, ctx.rank, summary, rows, breakdown_rows=_breakdown(rec, rows, trainer),
                          evaluation_rows=getattr(getattr(trainer, "evaluator", None), "rows", ()))
        warning = None
        if plan.get("profile_iterations"):
            profile_row, mine = loop.profile_window(trainer, ctx.device, plan["profile_iterations"],
                                                    trace_path=trace_path(ctx.rank), comm_timer=timer)
            writer.write_profile(attempt_id, ctx.rank, profile_row)
            warning = profile_warning(ctx, mine)
        if ctx.distributed:
            torch.distributed.barrier()
        if ctx.rank == 0:
            # A completed point's reason is its warning (campaign status and harvest show it).
            writer.finish_attempt(attempt_id, spec.point_id, "completed", reason=warning)
        if hasattr(trainer, "close"):
            trainer.close()
        if ckpt is not None:
            ckpt.remove()
        return {"rank": ctx.rank, "wall_s": summary["wall_s"], "iterations": summary["iterations"]}
    except Requeue as requeue:
        # Every rank saved its checkpoint; rank 0 records the attempt and lets submitit
        # requeue the job (it ends this process), the others end and are restarted with it.
        if ctx.rank == 0:
            writer.finish_attempt(attempt_id, spec.point_id, "requeued", reason=str(requeue))
            try:
                ckpt.requeue()  # type: ignore[union-attr]
            except Exception as exc:  # submitit would not requeue (e.g. too many time limits)
                writer.finish_attempt(attempt_id, spec.point_id, "failed",
                                      reason=f"rank 0: {type(exc).__name__}: {exc}"[:500])
                raise
        return {"rank": ctx.rank, "requeued_at": requeue.iteration}
    except BaseException as exc:
        # Every rank reports its own failure; the store keeps the first (sql/ops.py), so
        # a rank that failed is named, not the peer that timed out waiting for it.
        orphaned = exc if isinstance(exc, ControllerGone) else None
        if attempt_id is not None:
            reason = f"{type(exc).__name__}: {exc}".strip().splitlines()[0][:500] if str(exc) else type(exc).__name__
            try:
                writer.finish_attempt(attempt_id, spec.point_id, "failed", reason=f"rank {ctx.rank}: {reason}",
                                      rank=ctx.rank)
            except Exception:  # the store itself may be what failed
                traceback.print_exc()
        if ctx.world_size > 1:
            dist.end_local_peers()  # SLURM: srun --kill-on-bad-exit=1 does it
        raise
    finally:
        dist.teardown(ctx)
        writer.close()
        if orphaned is not None:  # reported and closed: end now, no controller waits for the rest
            end_rank(orphaned)
