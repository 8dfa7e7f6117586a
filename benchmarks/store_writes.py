"""The job's writer: batched per-iteration rows vs one commit per row, same SQLite store.

Both variants are ``trainers.writer.JobWriter.write_rank`` writing one rank's
``--rows`` iteration rows (plus its rank_timing summary) into one store (WAL,
``synchronous=NORMAL``, the pragmas every store gets); the only difference is the
batch size:

- batched:  ``BATCH_ROWS`` rows per transaction (the writer's default, 5,000);
- per row:  ``BATCH_ROWS = 1``, one transaction and commit per row: what a writer that
            stores each iteration as it happens would do.

Each round writes a new rank of the same attempt (fresh keys, so nothing is skipped as
a duplicate), interleaved A B, B A, ...; every write is checked by counting its rows.
Times include SQLAlchemy statement building, the idempotent ``INSERT ... ON CONFLICT DO
NOTHING`` and each commit; not the rows' creation. Prints

    batched/per-row rows/s: 48.3x (median of 2 paired rounds ...; 0.41 s vs 19.6 s)

    .venv/bin/python benchmarks/store_writes.py                 # 20,000 rows, 2 rounds (~1 min)
    .venv/bin/python benchmarks/store_writes.py --rows 5000 --rounds 4
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _common import interleaved, ratio_line
else:
    from benchmarks._common import interleaved, ratio_line


def iteration_rows(n: int) -> list[dict]:
    """``n`` iteration rows as a rank records them (the first 5 warm-up)."""
    return [{"iter": i, "warmup": i < 5, "iter_s": 0.05 + (i % 7) * 1e-4, "loss": 2.0 / (i + 1), "data_s": 0.002,
             "forward_s": 0.015, "backward_s": 0.025, "step_s": 0.005, "comm_s": 0.003} for i in range(n)]


def summary(n: int) -> dict:
    return {"host": "bench", "device": "cpu", "warmup_iterations": 5, "iterations": n - 5, "wall_s": 0.05 * n,
            "iter_mean_s": 0.05, "iter_median_s": 0.05, "iter_p95_s": 0.051, "images": 8 * n, "images_per_s": 160.0}


def setup_store(folder: Path) -> tuple[str, int]:
    """A fresh store with one campaign and one point; returns (url, point id)."""
    from campaign.store import open_store

    url = f"sqlite:///{folder / 'store.db'}"
    with open_store(url, create=True) as store:
        (pid,) = store.register({"id": "bench-store-writes", "created_at": time.time()},
                                [dict(idx=0, platform="local", trainer="synthetic", experiment="smoke",
                                      dataset="synthetic", gpus=1, nodes=1, repeat=0, executor="local",
                                      state="pending")])
    return url, pid


def measure(rows: int, rounds: int, folder: Path) -> dict[str, list[float]]:
    """Seconds per variant and round; raises if a write lost or doubled a row."""
    import trainers.writer as w

    url, pid = setup_store(folder)
    writer = w.JobWriter(url, busy_timeout_s=30.0, spool_dir="")
    key = writer.start_attempt(pid, job_id="bench", world_size=2 * rounds, provenance={})
    data, summ = iteration_rows(rows), summary(rows)
    default_batch = w.BATCH_ROWS
    counter = iter(range(10**6))

    def write(batch: int):
        def run(_round: int) -> float:
            rank = next(counter)
            w.BATCH_ROWS = batch
            try:
                t0 = time.perf_counter()
                writer.write_rank(key, rank, summ, data)
                elapsed = time.perf_counter() - t0
            finally:
                w.BATCH_ROWS = default_batch
            con = sqlite3.connect(folder / "store.db")
            try:
                got = con.execute("select count(*) from iteration where rank = ?", (rank,)).fetchone()[0]
            finally:
                con.close()
            if got != rows:
                raise SystemExit(f"error: rank {rank} wrote {got} rows, expected {rows}")
            return elapsed
        return run

    try:
        return interleaved({"batched": write(default_batch), "per_row": write(1)}, rounds)
    finally:
        writer.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 epilog="example: .venv/bin/python benchmarks/store_writes.py --rows 20000")
    ap.add_argument("--rows", type=int, default=20_000, help="iteration rows per write (default: 20,000)")
    ap.add_argument("--rounds", type=int, default=2, help="A/B rounds (default: 2)")
    args = ap.parse_args(argv)
    if args.rows <= 0 or args.rounds <= 0:
        raise SystemExit("error: --rows and --rounds must be positive")
    folder = Path(tempfile.mkdtemp(prefix="campaign-bench-writes-"))
    try:
        t = measure(args.rows, args.rounds, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    import trainers.writer as w

    rate = lambda xs: [args.rows / x for x in xs]  # noqa: E731
    print(f"{args.rows:,} iteration rows per write, SQLite WAL; batched = {w.BATCH_ROWS:,} rows per transaction")
    print(ratio_line("batched/per-row rows/s", rate(t["batched"]), rate(t["per_row"]), unit="rows/s"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
