"""``campaign harvest`` at campaign scale vs a pandas read_sql + groupby baseline.

Builds one SQLite store (the project's schema, ``open_store(create=True)``) holding one
campaign of ``--points`` completed points (1,000) and ``--iterations`` per-iteration rows
(1,000,000), inserted with SQLAlchemy Core executemany:

- 5 platforms x GPUs 1,2,4,8 x ``trainer.optimizer=sgd,adamw`` x repeats;
  one rank_timing and one profile row per rank; per point ``iterations / points`` iteration
  rows over its ranks (1,000, 500, 250, 125 per rank), the first 5 per rank warm-up;
  one point in 20 has a failed attempt before its completed one;
- ``--sampled`` (default 0.5) of the points are sampled runs (``experiment=projection``:
  40x more iterations planned than timed), whose full time harvest projects, with an
  interval from their timed ``iteration`` rows (campaign_window/: batch
  means with a drift term); full runs need no iteration row.
  The store has the schema's indexes (``ix_iteration_job``, which harvest reads the
  sampled runs' iterations from, included).

Then, interleaved A B, B A, ... each in a fresh Python process (start-up and imports
included in both, as a person running them pays them):

- harvest:  ``python -m campaign harvest CID --store URL --to csv --out FILE`` (the
            time-to-solution table: per-point SQL aggregates, projection, polars, CSV);
- pandas:   ``pandas.read_sql`` of the campaign's point/attempt/rank_timing/profile rows
            and of the sampled attempts' timed iteration rows, ``groupby`` to the same
            per-point aggregates (latest completed attempt; slowest rank; projection with
            the same interval; median over repeats; speedup T1/TN), written to CSV;
- report:   ``python -m campaign report CID --store URL --out FILE`` (issue 28: the page in
            at most 2x harvest's time, at most 5 MB; the page's figures are native SVG, and
            its cost beyond the CSV's is mostly every table of points, the fitted model's
            bootstrap included, which the CSV of the scaling table does not build);
- model:    the model table (``--table model``: fit, bootstrap, predictions) on the same point
            frame, in process, beside harvest's median (issue 24: at most 20 % added);

and prints the ratio pandas/harvest of wall times, report/harvest and the page's size,
whether harvest met the 2 s target,
the two CSVs' agreement (time and speedup per row), the query plans of the harvest
queries (``--explain``), and a profile of one in-process harvest: where its time goes.

    .venv/bin/python benchmarks/harvest_scale.py                 # 1,000 points, 1M rows, 3 rounds (~45 s)
    .venv/bin/python benchmarks/harvest_scale.py --sampled 0     # full runs only: iteration rows unread
    .venv/bin/python benchmarks/harvest_scale.py --points 40 --iterations 4000 --rounds 1   # smoke size
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import csv
import io
import json
import math
import pstats
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _common import (clean_env, command_line, figure, fmt, interleaved, load_average, ratio_figure, ratio_line,
                         save, save_arg)
else:
    from benchmarks._common import (clean_env, command_line, figure, fmt, interleaved, load_average, ratio_figure,
                                    ratio_line, save, save_arg)
from campaign_window import window_interval  # noqa: E402  (plain Python: no polars imported)

PLATFORMS = ("v100", "a100", "a100_nvlink_40", "a100_nvlink_80", "local")
GPUS = (1, 2, 4, 8)
OPTIMIZERS = ("sgd", "adamw")
WARMUP = 5
PROJECTION_FACTOR = 40  # a sampled run plans this many times the iterations it timed
CAMPAIGN_ID = "20261121-000000-bench"
TARGET_S = 1.0  # issue 19: 1M iteration rows / 1,000 jobs to CSV in <= 1 s here
REPORT_RATIO = 2.0  # issue 28: the report page in at most 2x harvest's time for the same store
REPORT_MB = 5.0  # ... and at most 5 MB
MODEL_SHARE = 0.2  # issue 24: the model table adds at most 20 % to harvest's time
BASELINES = {"--pandas-baseline": "pandas_baseline", "--pandas-same-sql": "pandas_same_sql"}


# ---------------------------------------------------------------- the store

def build_store(url: str, points: int, iterations: int, sampled: float, seed: int = 0) -> dict:
    """Fill an empty store; returns counts of what it wrote."""
    from sqlalchemy import insert, select

    from campaign.store import open_store
    from campaign_sql.schema import attempt, iteration, profile, rank_timing

    rng = random.Random(seed)
    per_point = iterations // points
    if per_point < max(GPUS) * (WARMUP + 2):
        raise SystemExit(f"error: --iterations {iterations} gives {per_point} rows per point; "
                         f"need at least {max(GPUS) * (WARMUP + 2)} (8 ranks x warm-up + 2)")
    combos = [(p, g, o) for p in PLATFORMS for g in GPUS for o in OPTIMIZERS]
    config = {"platform": {"name": "x", "description": "benchmark platform " * 8, "peak_tflops": {"fp32": 19.5}},
              "experiment": {"name": "x", "images_per_gpu": 8}, "trainer": {"name": "synthetic", "params": {"width": 64}},
              "dataset": {"name": "synthetic", "image_size": 224}, "store": {"url": url}, "notes": "x" * 1500}
    rows, plans = [], []
    repeats = -(-points // len(combos))
    for i in range(points):
        plat, gpus, opt = combos[i % len(combos)]
        repeat = i // len(combos)
        is_sampled = rng.random() < sampled
        # weak scaling as the study's: every GPU count times the same images (8 x gpus x
        # timed is one number), so T1/TN is a speedup (harvest leaves it absent otherwise)
        timed = (per_point - WARMUP * max(GPUS)) // gpus
        per_rank = timed + WARMUP
        exp = "projection" if is_sampled else "weak_scaling"
        rows.append({"idx": i, "platform": plat, "trainer": "synthetic", "experiment": exp, "dataset": "synthetic",
                     "gpus": gpus, "nodes": 1, "repeat": repeat, "batch_per_gpu": 8,
                     "iterations": timed * PROJECTION_FACTOR if is_sampled else timed,
                     # a repeat is the same point run again (repeats=K), not another seed: harvest
                     # takes the median over a point's repeats
                     "overrides": [f"platform={plat}", f"gpus={gpus}", f"experiment={exp}", f"trainer.optimizer={opt}",
                                   f"repeats={repeats}"],
                     "config": config, "executor": "slurm", "job_id": f"{1000 + i}", "state": "completed",
                     "submitted_at": 1.0, "started_at": 2.0, "ended_at": 3.0})
        plans.append((gpus, per_rank, timed, 0.05 * (1 + 0.04 * math.log2(gpus)) * (1.12 if opt == "adamw" else 1.0)))
    with open_store(url, create=True) as store:
        ids = store.register({"id": CAMPAIGN_ID, "name": "harvest-scale", "created_at": time.time()}, rows)
        engine = store.engine
        with engine.begin() as conn:
            att = []
            for pid, i in zip(ids, range(points)):
                if i % 20 == 7:  # a requeued point: a failed attempt first
                    att.append({"point_id": pid, "attempt_no": 0, "state": "failed", "reason": "NODE_FAIL",
                                "world_size": plans[i][0], "started_at": 1.0, "ended_at": 1.5, "provenance": {"host": "n2"}})
                att.append({"point_id": pid, "attempt_no": 1 if i % 20 == 7 else 0, "state": "completed", "reason": None,
                            "world_size": plans[i][0], "started_at": 2.0, "ended_at": 3.0, "provenance": {"host": "n1"}})
            conn.execute(insert(attempt), att)
            done = dict(conn.execute(select(attempt.c.point_id, attempt.c.id).where(attempt.c.state == "completed")).all())
        n_iter = n_rank = 0
        batch: list[dict] = []
        with engine.begin() as conn:
            ranks, profs = [], []
            for pid, (gpus, per_rank, timed, base) in zip(ids, plans):
                aid = done[pid]
                for r in range(gpus):
                    xs = [base * (1 + 0.03 * rng.random()) for _ in range(per_rank)]
                    for it, x in enumerate(xs):
                        batch.append({"attempt_id": aid, "rank": r, "iter": it, "warmup": it < WARMUP, "iter_s": x,
                                      "loss": 2.0 / (it + 1), "data_s": 0.1 * x, "forward_s": 0.3 * x,
                                      "backward_s": 0.45 * x, "step_s": 0.1 * x, "comm_s": 0.05 * x})
                    wall = sum(xs[WARMUP:])
                    ranks.append({"attempt_id": aid, "rank": r, "host": "n1", "device": "cuda:0",
                                  "warmup_iterations": WARMUP, "warmup_s": sum(xs[:WARMUP]), "iterations": timed,
                                  "wall_s": wall, "iter_mean_s": wall / timed, "iter_median_s": sorted(xs[WARMUP:])[timed // 2],
                                  "iter_p95_s": max(xs), "images": 8 * timed, "images_per_s": 8 * timed / wall,
                                  "final_loss": 0.1, "data_wait_s": 0.1 * wall, "compute_s": 0.85 * wall, "comm_s": 0.05 * wall})
                    profs.append({"attempt_id": aid, "rank": r, "iterations": 10, "total_s": 1.0, "cpu_s": 0.3,
                                  "device_s": 0.8, "cpu_util": 0.3, "gpu_util": 0.8})
                if len(batch) >= 100_000:
                    conn.execute(insert(iteration), batch)
                    n_iter += len(batch)
                    batch = []
            if batch:
                conn.execute(insert(iteration), batch)
                n_iter += len(batch)
            conn.execute(insert(rank_timing), ranks)
            conn.execute(insert(profile), profs)
            n_rank = len(ranks)
    return {"points": points, "iteration_rows": n_iter, "rank_rows": n_rank,
            "sampled_points": sum(1 for r in rows if r["experiment"] == "projection")}


# ---------------------------------------------------------------- the pandas baseline

def pandas_baseline(url: str, campaign_id: str, out: str) -> None:
    """The naive read: every raw row of the campaign's points, attempts and ranks (and
    the sampled attempts' iteration rows) through pandas.read_sql, the per-point
    aggregates and the per-iteration max over ranks computed by pandas, harvest's interval
    (campaign_window) per attempt; then the same finishing steps. Against
    ``pandas_same_sql`` it shows what harvest's SQL design saves."""
    import pandas as pd
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    with engine.connect() as conn:
        pts = pd.read_sql(text("SELECT id AS point_id, idx, platform, trainer, experiment, gpus, iterations, overrides "
                               "FROM point WHERE campaign_id = :c"), conn, params={"c": campaign_id})
        att = pd.read_sql(text("SELECT a.id AS attempt_id, a.point_id, a.attempt_no FROM attempt a JOIN point p "
                               "ON p.id = a.point_id WHERE p.campaign_id = :c AND a.state = 'completed'"),
                          conn, params={"c": campaign_id})
        last = att.loc[att.groupby("point_id")["attempt_no"].idxmax()]
        rt = pd.read_sql(text("SELECT r.* FROM rank_timing r JOIN attempt a ON a.id = r.attempt_id JOIN point p "
                              "ON p.id = a.point_id WHERE p.campaign_id = :c"), conn, params={"c": campaign_id})
        df = pts.merge(last, on="point_id")
        ranks = rt.groupby("attempt_id").agg(time_s=("wall_s", "max"), timed_iterations=("iterations", "max"),
                                             images=("images", "sum"), iter_median_s=("iter_median_s", "mean"),
                                             ranks=("rank", "count")).reset_index()
        df = df.merge(ranks, on="attempt_id")
        sampled = df[df["timed_iterations"] < df["iterations"]]
        bounds = {}
        if len(sampled):
            it = pd.read_sql(text("SELECT i.attempt_id, i.iter, i.iter_s FROM iteration i JOIN attempt a "
                                  "ON a.id = i.attempt_id JOIN point p ON p.id = a.point_id "
                                  "WHERE p.campaign_id = :c AND i.warmup = 0"), conn, params={"c": campaign_id})
            it = it[it["attempt_id"].isin(set(sampled["attempt_id"]))]
            job = it.groupby(["attempt_id", "iter"])["iter_s"].max().reset_index()
            full = dict(zip(sampled["attempt_id"], sampled["iterations"]))
            for aid, xs in job.groupby("attempt_id")["iter_s"]:
                w = window_interval(xs.tolist(), int(full[aid]))
                if w is not None:
                    bounds[aid] = w.halfwidth
    _finish_pandas(df, bounds, out)


def pandas_same_sql(url: str, campaign_id: str, out: str) -> None:
    """The fair peer: pandas.read_sql of harvest's OWN queries (campaign.harvest.query:
    per-point aggregates computed by the database from the covering index, the sampled
    runs' job iterations), harvest's interval (campaign_window, attempt by
    attempt, as harvest does), then the same projection, medians and speedup in pandas.
    Only the data-frame library differs from harvest."""
    import pandas as pd
    from sqlalchemy import create_engine

    from campaign.harvest.query import completed_points_query, job_iterations_query

    engine = create_engine(url)
    with engine.connect() as conn:
        df = pd.read_sql(completed_points_query([campaign_id]), conn)
        sampled = df.loc[df["timed_iterations"] < df["iterations"], "attempt_id"].tolist()
        it = pd.read_sql(job_iterations_query(sampled), conn) if sampled else pd.DataFrame(columns=["attempt_id", "iter_s"])
    bounds = {}
    if len(it):
        proj = df.loc[df["timed_iterations"] < df["iterations"]]
        full = dict(zip(proj["attempt_id"], proj["iterations"] - proj["sample_transient_iterations"].fillna(0)))
        for aid, xs in it.groupby("attempt_id", sort=False)["iter_s"]:  # harvest's interval, attempt by attempt
            w = window_interval(xs.tolist(), int(full[aid]))
            if w is not None:
                bounds[aid] = w.halfwidth
    _finish_pandas(df, bounds, out)


def _finish_pandas(df, bounds: dict, out: str) -> None:
    """Projection (harvest's: the measured transient plus the rate part, the checks left
    out), interval, median over repeats, speedup T1/TN and efficiency, to CSV."""
    for col in ("sample_transient_s", "sample_transient_iterations", "sample_check_s"):
        df[col] = df[col].fillna(0) if col in df else 0
    proj = df["timed_iterations"] < df["iterations"]
    rate = (df["time_s"] - df["sample_check_s"]) / df["timed_iterations"] \
        * (df["iterations"] - df["sample_transient_iterations"]).clip(lower=0)
    df["time_s"] = df["time_s"].where(~proj, df["sample_transient_s"] + rate)
    half = df["attempt_id"].map(bounds)
    df["time_lo_s"] = (df["sample_transient_s"] + rate * (1 - half).clip(lower=0)).where(proj & half.notna())
    df["time_hi_s"] = (df["sample_transient_s"] + rate * (1 + half)).where(proj & half.notna())
    df["variant"] = _variants(df["overrides"].tolist())
    keys = ["platform", "trainer", "experiment", "variant"]
    g = df.groupby(keys + ["gpus"]).agg(repeats=("time_s", "size"), time_s=("time_s", "median"),
                                        time_lo_s=("time_lo_s", "median"), time_hi_s=("time_hi_s", "median")).reset_index()
    base = g[g["gpus"] == 1][keys + ["time_s"]].rename(columns={"time_s": "t1_s"})
    g = g.merge(base, on=keys, how="left")
    g["speedup"] = g["t1_s"] / g["time_s"]
    g["efficiency"] = g["speedup"] / g["gpus"]
    g.drop(columns="t1_s").sort_values(keys + ["gpus"]).to_csv(out, index=False)


def _variants(all_overrides: list) -> list[str]:
    skip = ("platform", "gpus", "nodes", "repeats", "trainer", "experiment", "dry_run", "name", "store.url", "results_dir")
    parsed = []
    for o in all_overrides:
        d = {}
        for item in json.loads(o) if isinstance(o, str) else o:
            k, _, v = item.partition("=")
            if k not in skip and not k.startswith("hydra."):
                d[k] = v
        parsed.append(d)
    # in the sweep's order of first appearance, as harvest names a variant (campaign.common.varying)
    keys = list(dict.fromkeys(k for d in parsed for k in d))
    varying = [k for k in keys if len({d.get(k) for d in parsed}) > 1]
    return [" ".join(f"{k}={d[k]}" for k in varying if k in d) for d in parsed]


# ---------------------------------------------------------------- measuring

def timed_run(argv: list[str], env: dict) -> float:
    t0 = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    elapsed = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"error: {' '.join(argv[:4])} ... exited {done.returncode}:\n{done.stderr[-3000:]}")
    return elapsed


def compare_csv(harvest_csv: Path, pandas_csv: Path) -> str:
    """How far the two CSVs' time_s and speedup are apart, row by row (same keys)."""
    def rows(path):
        with open(path, newline="") as fh:
            return {(r["platform"], r["trainer"], r["experiment"], r["variant"], int(r["gpus"])): r for r in csv.DictReader(fh)}

    h, p = rows(harvest_csv), rows(pandas_csv)
    if set(h) != set(p):
        return f"DIFFER: {len(set(h) ^ set(p))} row key(s) in one CSV only ({len(h)} harvest rows, {len(p)} pandas rows)"
    worst = 0.0
    for k in h:
        for col in ("time_s", "speedup", "time_lo_s", "time_hi_s"):
            a, b = h[k].get(col) or "", p[k].get(col) or ""
            if (a == "") != (b == ""):
                return f"DIFFER: {col} of {k} is {a or 'empty'} in harvest, {b or 'empty'} in pandas"
            if a:
                worst = max(worst, abs(float(a) - float(b)) / max(abs(float(b)), 1e-12))
    return f"agree: {len(h)} rows, time_s/speedup/interval within {worst:.1e} (relative)"


def explain(url: str) -> list[str]:
    """SQLite's plan for each harvest query, on this store (compiled with bound values)."""
    from sqlalchemy import create_engine, select

    from campaign.harvest import query as q
    from campaign_sql.schema import attempt

    engine = create_engine(url)
    out = []
    with engine.connect() as conn:
        aids = [r[0] for r in conn.execute(select(attempt.c.id).where(attempt.c.state == "completed").limit(500))]
        for name, stmt in (("completed_points_query", q.completed_points_query([CAMPAIGN_ID])),
                           ("job_iterations_query", q.job_iterations_query(aids)),
                           ("breakdown_query", q.breakdown_query(aids))):
            compiled = stmt.compile(dialect=engine.dialect, compile_kwargs={"render_postcompile": True})
            params = compiled.construct_params()
            sql = str(compiled)
            plan = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql, tuple(params[k] for k in compiled.positiontup)).all()
            out.append(f"  {name}:")
            out += [f"    {r[-1]}" for r in plan]
    return out


def model_cost(url: str, rounds: int) -> tuple[list[float], int, int]:
    """The model table's own time (campaign/harvest/model.py: fit, bootstrap, predictions)
    on the campaign's point frame, in process with imports warm, once per round: what
    ``--table model`` (or ``all``) adds to the harvest of the same points. With the rows
    and series it made."""
    from campaign.harvest.derive import point_frame
    from campaign.harvest.model import model_table
    from campaign.store import open_store

    with open_store(url, readonly=True) as store:
        points = point_frame(store, [CAMPAIGN_ID])
    table = model_table(points)  # imports and caches warm, as the profile below
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        model_table(points)
        out.append(time.perf_counter() - t0)
    series = table.select("platform", "trainer", "experiment", "variant", "span").unique().height if table.height else 0
    return out, table.height, series


def profile_harvest(url: str, folder: Path, top: int) -> list[str]:
    """One in-process harvest under cProfile: its own time, then where it goes."""
    from campaign.harvest.run import harvest

    with contextlib.redirect_stderr(io.StringIO()):  # its "wrote FILE" lines
        harvest(CAMPAIGN_ID, store_url=url, fmt="csv", out=str(folder / "warm.csv"))  # imports, caches
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        harvest(CAMPAIGN_ID, store_url=url, fmt="csv", out=str(folder / "profiled.csv"))
        prof.disable()
        wall = time.perf_counter() - t0
    buf = io.StringIO()
    st = pstats.Stats(prof, stream=buf)
    lines = [f"in-process harvest (imports warm), under cProfile: {fmt(wall)}; cumulative time of its parts:"]
    entries = []
    for (file, line, func), (cc, nc, tt, ct, callers) in st.stats.items():
        if "/campaign/harvest/" in file or "campaign_sql" in file or func in ("execute", "fetchall", "all", "_frame"):
            entries.append((ct, f"{Path(file).name}:{func}", nc))
    for ct, name, nc in sorted(entries, reverse=True)[:top]:
        lines.append(f"  {ct:7.3f} s  {100 * ct / wall:5.1f} %  {name} ({nc} call(s))")
    own = sorted(((tt, f"{Path(file).parent.name}/{Path(file).name}:{func}", nc)
                  for (file, line, func), (cc, nc, tt, ct, callers) in st.stats.items()), reverse=True)[:top]
    lines.append("own time (tottime), any module:")
    lines += [f"  {tt:7.3f} s  {100 * tt / wall:5.1f} %  {name} ({nc} call(s))" for tt, name, nc in own]
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 epilog="example: .venv/bin/python benchmarks/harvest_scale.py --sampled 0.5")
    ap.add_argument("--points", type=int, default=1000, help="completed points (default: 1,000)")
    ap.add_argument("--iterations", type=int, default=1_000_000, help="per-iteration rows in all (default: 1,000,000)")
    ap.add_argument("--sampled", type=float, default=0.5, help="share of points that are sampled runs (default: 0.5)")
    ap.add_argument("--rounds", type=int, default=3, help="A/B rounds (default: 3)")
    ap.add_argument("--explain", action="store_true", help="print SQLite's query plans of the harvest queries")
    ap.add_argument("--profile", type=int, default=12, metavar="N", help="lines of profile to print (0: no profile)")
    ap.add_argument("--keep", action="store_true", help="keep the store and CSVs")
    save_arg(ap)
    args = ap.parse_args(argv)
    load0 = load_average()
    if args.points <= 0 or args.rounds <= 0 or not 0 <= args.sampled <= 1:
        raise SystemExit("error: --points and --rounds must be positive, --sampled within 0..1")
    folder = Path(tempfile.mkdtemp(prefix="campaign-bench-harvest-"))
    url = f"sqlite:///{folder / 'store.db'}"
    try:
        t0 = time.perf_counter()
        built = build_store(url, args.points, args.iterations, args.sampled)
        size = (folder / "store.db").stat().st_size + sum(f.stat().st_size for f in folder.glob("store.db-*"))
        print(f"store: {built['points']:,} completed points ({built['sampled_points']:,} sampled runs), "
              f"{built['iteration_rows']:,} iteration rows, {built['rank_rows']:,} rank rows, "
              f"{size / 2**20:.0f} MiB; built in {fmt(time.perf_counter() - t0)}")
        env = clean_env()
        py = sys.executable
        h_csv, p_csv = folder / "harvest.csv", folder / "pandas.csv"
        me = str(Path(__file__).resolve())
        page = folder / "report.html"  # campaign report of the same store (issue 28)
        csvs = {"harvest": h_csv, "pandas_sql": p_csv, "pandas_naive": folder / "pandas_naive.csv"}
        t = interleaved({
            "harvest": lambda r: timed_run([py, "-m", "campaign", "harvest", CAMPAIGN_ID, "--store", url, "--to", "csv",
                                            "--out", str(h_csv)], env),
            "pandas_sql": lambda r: timed_run([py, me, "--pandas-same-sql", url, CAMPAIGN_ID, str(p_csv)], env),
            "pandas_naive": lambda r: timed_run([py, me, "--pandas-baseline", url, CAMPAIGN_ID,
                                                 str(csvs["pandas_naive"])], env),
            "report": lambda r: timed_run([py, "-m", "campaign", "report", CAMPAIGN_ID, "--store", url,
                                           "--out", str(page)], env),
        }, args.rounds)
        print("pandas baseline with harvest's own SQL and interval (only the data-frame library differs):")
        print("  " + ratio_line("pandas/harvest wall time (fresh process each)", t["pandas_sql"], t["harvest"]))
        print("what harvest's SQL design saves (per-point aggregates and the job's iterations in SQL from the "
              "covering index), both in pandas:")
        print("  " + ratio_line("naive read/same SQL wall time", t["pandas_naive"], t["pandas_sql"]))
        # the goal is judged on the median, the figure the README's table shows
        best, median = min(t["harvest"]), statistics.median(t["harvest"])
        verdict = "meets" if median <= TARGET_S else "MISSES"
        print(f"harvest {verdict} the {TARGET_S:g} s target here: median {fmt(median)} of {len(t['harvest'])}, "
              f"best {fmt(best)}")
        report_ratio = statistics.median(t["report"]) / statistics.median(t["harvest"])
        page_mb = page.stat().st_size / 1e6
        print("  " + ratio_line("report/harvest wall time (the page vs the CSV, fresh process each)", t["report"],
                                t["harvest"]))
        print(f"report {'meets' if report_ratio <= REPORT_RATIO else 'MISSES'} the {REPORT_RATIO:g}x goal here; "
              f"its page is {page_mb:.2f} MB ({'meets' if page_mb <= REPORT_MB else 'MISSES'} the "
              f"{REPORT_MB:g} MB goal)")
        model_s, model_rows, model_series = model_cost(url, args.rounds)
        model_share = statistics.median(model_s) / statistics.median(t["harvest"])
        print(f"model table (issue 24): {fmt(statistics.median(model_s))} in process (median of {len(model_s)}; "
              f"{model_series} series, {model_rows} rows) = {100 * model_share:.1f} % added to harvest's median "
              f"{fmt(statistics.median(t['harvest']))}; {'meets' if model_share <= MODEL_SHARE else 'MISSES'} "
              f"the {100 * MODEL_SHARE:g} % goal here")
        agree_sql, agree_naive = compare_csv(h_csv, p_csv), compare_csv(h_csv, csvs["pandas_naive"])
        print(f"CSVs (same SQL) {agree_sql}")
        print(f"CSVs (naive)    {agree_naive}")
        if args.save:
            size = f"{args.points:,} points, {args.iterations:,} rows, {args.sampled:g} sampled"
            print("saved:", save("harvest_scale", command=command_line("harvest_scale.py", argv), load_start=load0,
                                 figures=[
                figure("harvest_s", f"harvest to CSV, {size} (fresh process)", t["harvest"], unit="s",
                       goal=f"<= {TARGET_S:g} s", met=median <= TARGET_S),
                ratio_figure("same_sql", "pandas with harvest's own SQL and interval / harvest", t["pandas_sql"],
                             t["harvest"], note=f"CSVs {agree_sql.split(':')[0]}"),
                ratio_figure("naive", "naive pandas read / pandas with the same SQL (what the SQL design saves)",
                             t["pandas_naive"], t["pandas_sql"], note=f"CSVs {agree_naive.split(':')[0]}"),
                ratio_figure("report", f"campaign report / harvest to CSV, {size} (page {page_mb:.2f} MB)",
                             t["report"], t["harvest"], goal=f"<= {REPORT_RATIO:g}x, <= {REPORT_MB:g} MB",
                             met=report_ratio <= REPORT_RATIO and page_mb <= REPORT_MB),
                figure("model_share", f"model table / harvest to CSV, {size} (in process / fresh process)",
                       [m / h for m, h in zip(model_s, t["harvest"])], unit="x",
                       goal=f"<= {MODEL_SHARE:g}", met=model_share <= MODEL_SHARE),
            ]))
        if args.explain:
            print("query plans (SQLite EXPLAIN QUERY PLAN):")
            print("\n".join(explain(url)))
        if args.profile:
            print("\n".join(profile_harvest(url, folder, args.profile)))
    finally:
        if args.keep:
            print(f"kept: {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] in BASELINES:
        globals()[BASELINES[sys.argv[1]]](*sys.argv[2:])
        sys.exit(0)
    sys.exit(main())
