"""Concurrent job writers: W processes write into one store at once, as W jobs of a
campaign finishing together do (``benchmarks/store_writes.py --writers W``).

Each writer is a fresh process (spawned, imports done before the start signal) holding
its own ``trainers.writer.JobWriter`` on its own point: it starts an attempt, writes one
rank's ``rows`` iteration rows and its summary, and finishes the attempt, exactly as a
rank does. All writers wait on one event and start together; the figure is the
aggregate rows/s over the round (first start to last finish). After each round the store
is counted: rows **lost** (a writer's rows neither in the store nor in its spool file),
rows **doubled** (more rows than written for a (attempt, rank)), writers that fell back
to their **spool** file (the store stayed busy past the writer's timeout: those files are
then ingested and counted too, so a spooled row is not a lost one).
"""

from __future__ import annotations

import multiprocessing as mp
import time
import uuid
from pathlib import Path
from typing import Any


def iteration_rows(n: int) -> list[dict]:
    """``n`` iteration rows as a rank records them (the first 5 warm-up)."""
    return [{"iter": i, "warmup": i < 5, "iter_s": 0.05 + (i % 7) * 1e-4, "loss": 2.0 / (i + 1), "data_s": 0.002,
             "forward_s": 0.015, "backward_s": 0.025, "step_s": 0.005, "comm_s": 0.003} for i in range(n)]


def summary(n: int) -> dict:
    """A rank_timing summary for a rank of ``n`` iterations."""
    return {"host": "bench", "device": "cpu", "warmup_iterations": 5, "iterations": n - 5, "wall_s": 0.05 * n,
            "iter_mean_s": 0.05, "iter_median_s": 0.05, "iter_p95_s": 0.051, "images": 8 * n, "images_per_s": 160.0}


def _writer(url: str, point_id: int, rows: int, batch: int, spool_dir: str, busy_timeout_s: float,
            go: Any, out: Any) -> None:
    """One job: start an attempt, write its rank, finish it; report (start, end, spooled)."""
    import trainers.writer as w

    data, summ = iteration_rows(rows), summary(rows)
    w.BATCH_ROWS = batch
    writer = w.JobWriter(url, busy_timeout_s=busy_timeout_s, spool_dir=spool_dir)
    go.wait()
    t0 = time.monotonic()
    try:
        key = writer.start_attempt(point_id, job_id=f"bench-{point_id}", world_size=1, provenance={})
        writer.write_rank(key, 0, summ, data)
        writer.finish_attempt(key, point_id, "completed")
        out.put((point_id, t0, time.monotonic(), writer.spool_path is not None, None))
    except Exception as exc:  # reported, and the round fails loudly in the parent
        out.put((point_id, t0, time.monotonic(), writer.spool_path is not None, f"{type(exc).__name__}: {exc}"))
    finally:
        writer.close()


def register_points(url: str, n: int, tag: str) -> list[int]:
    """A campaign of ``n`` fresh points in the store at ``url``; their ids."""
    from campaign.store import open_store

    with open_store(url, create=True) as store:
        return store.register(
            {"id": f"bench-{tag}", "created_at": time.time()},
            [dict(idx=i, platform="local", trainer="synthetic", experiment="smoke", dataset="synthetic", gpus=1,
                  nodes=1, repeat=0, executor="local", state="pending") for i in range(n)])


def count_rows(url: str, point_ids: list[int]) -> dict[int, int]:
    """Iteration rows stored per point (all its attempts, rank 0)."""
    from sqlalchemy import func, select

    from campaign.store import open_store
    from campaign_sql.schema import attempt, iteration

    with open_store(url) as store, store.engine.connect() as conn:
        q = (select(attempt.c.point_id, func.count()).select_from(iteration.join(attempt))
             .where(attempt.c.point_id.in_(point_ids)).group_by(attempt.c.point_id))
        got = dict(conn.execute(q).all())
    return {p: int(got.get(p, 0)) for p in point_ids}


def run_round(url: str, writers: int, rows: int, batch: int, spool_root: Path, *,
              busy_timeout_s: float = 30.0) -> dict[str, Any]:
    """One round of ``writers`` concurrent writers; the aggregate rate and the row count."""
    from campaign.observe.ingest import ingest_files
    from campaign.store import open_store

    tag = uuid.uuid4().hex[:8]
    points = register_points(url, writers, tag)
    spool = spool_root / tag
    ctx = mp.get_context("spawn")
    go, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(url, p, rows, batch, str(spool), busy_timeout_s, go, out))
             for p in points]
    for p in procs:
        p.start()
    time.sleep(0.5)  # let every process import before the start signal (not timed either way)
    go.set()
    results = [out.get(timeout=3600) for _ in procs]
    for p in procs:
        p.join()
    errors = [r[4] for r in results if r[4]]
    if errors:
        raise SystemExit(f"error: {len(errors)} writer(s) failed; first: {errors[0]}")
    elapsed = max(r[2] for r in results) - min(r[1] for r in results)
    spooled = sorted(spool.glob("*.jsonl")) if spool.is_dir() else []
    if spooled:
        with open_store(url) as store:
            ingest_files(store, spooled, campaign_id=f"bench-{tag}")
    stored = count_rows(url, points)
    return {
        "elapsed_s": elapsed,
        "rows_per_s": writers * rows / elapsed if elapsed > 0 else float("nan"),
        "lost": sum(max(rows - n, 0) for n in stored.values()),
        "doubled": sum(max(n - rows, 0) for n in stored.values()),
        "spooled_writers": sum(1 for r in results if r[3]),
    }
