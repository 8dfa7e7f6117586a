"""What every rank of a campaign job runs: set up, train, measure, write rows."""

from __future__ import annotations

import os
import platform as _platform
import sys
import traceback
from typing import Any

import torch

from trainers import dist, loop, registry
from trainers.instrument import Recorder
from trainers.writer import JobWriter


def _provenance(ctx: dist.DistContext, spec: dict) -> dict[str, Any]:
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
        "threads_per_rank": torch.get_num_threads(),
        "job_id": spec.get("job_id") or os.environ.get("SLURM_JOB_ID") or os.environ.get("SUBMITIT_LOCAL_JOB_ID"),
        "slurm_nodelist": os.environ.get("SLURM_JOB_NODELIST"),
        "container": spec.get("container"),
        "config": spec["config"],
    }


def _set_threads(n: int | None) -> None:
    if n and n > 0:
        torch.set_num_threads(n)
        os.environ["OMP_NUM_THREADS"] = str(n)


def run_point(spec: dict) -> dict:
    """Entry of one rank. ``spec``: point_id, store_url, config, plan, threads_per_rank."""
    _set_threads(spec.get("threads_per_rank"))
    cfg, plan = spec["config"], spec["plan"]
    ctx = dist.setup(want_device=cfg["platform"]["device"], master_port=spec.get("master_port"))
    writer = JobWriter(spec["store_url"], busy_timeout_s=spec.get("busy_timeout_s", 30.0))
    attempt_id = None
    job_id = os.environ.get("SLURM_JOB_ID") or os.environ.get("SUBMITIT_LOCAL_JOB_ID") or str(os.getpid())
    if os.environ.get("SLURM_ARRAY_JOB_ID"):
        job_id = f"{os.environ['SLURM_ARRAY_JOB_ID']}_{os.environ.get('SLURM_ARRAY_TASK_ID')}"
    try:
        if ctx.rank == 0:
            attempt_id = writer.start_attempt(
                spec["point_id"], job_id=job_id, world_size=ctx.world_size, provenance=_provenance(ctx, spec)
            )
        attempt_id = dist.broadcast_object(ctx, attempt_id)
        trainer = registry.get(cfg["trainer"]["name"])(ctx, cfg, plan)
        rec = Recorder(ctx.device, warmup=plan["warmup"])
        if ctx.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(ctx.device)
        loop.train(trainer, rec, plan["warmup"] + plan["iterations"])
        rows = rec.rows()
        summary = rec.summary(rows)
        summary.update(
            host=ctx.host,
            device=str(ctx.device),
            trainable_params=int(getattr(trainer, "trainable_params", 0)) or None,
            flops_per_iter=getattr(trainer, "flops_per_iter", None),
            peak_memory_bytes=float(torch.cuda.max_memory_allocated(ctx.device)) if ctx.device.type == "cuda" else None,
        )
        profile_row = loop.profile_window(trainer, ctx.device, plan["profile_iterations"]) if plan.get("profile_iterations") else None
        writer.write_rank(attempt_id, ctx.rank, summary, rows, profile_row=profile_row,
                          breakdown_rows=getattr(trainer, "breakdown_rows", lambda: [])())
        if ctx.distributed:
            torch.distributed.barrier()
        if ctx.rank == 0:
            writer.finish_attempt(attempt_id, spec["point_id"], "completed")
        if hasattr(trainer, "close"):
            trainer.close()
        return {"rank": ctx.rank, "wall_s": summary["wall_s"], "iterations": summary["iterations"]}
    except BaseException as exc:
        if ctx.rank == 0 and attempt_id is not None:
            reason = f"{type(exc).__name__}: {exc}".strip().splitlines()[0][:500] if str(exc) else type(exc).__name__
            try:
                writer.finish_attempt(attempt_id, spec["point_id"], "failed", reason=f"rank 0: {reason}")
            except Exception:  # the store itself may be what failed
                traceback.print_exc()
        raise
    finally:
        dist.teardown(ctx)
        writer.close()
