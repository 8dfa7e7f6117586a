"""The harvest's SQL on a real SQLite store filled by hand: which attempt a point's row
comes from, what the rank and iteration aggregates are, that filters are bound, and
that the query plans read only the campaign's rows (no scan of a whole table, so a
store with many campaigns harvests one as fast as a store with only that one)."""

from __future__ import annotations

import polars as pl
import pytest
from sqlalchemy import insert, select

from campaign.harvest.derive import point_frame
from campaign.harvest.query import completed_points_query, job_iterations_query
from campaign_window import window_interval
from campaign.store import open_store
from campaign_sql.schema import attempt, iteration, profile, rank_timing

CID, OTHER = "20260101-000000-aaaa", "20260102-000000-bbbb"
# per rank: timed iteration times (after one warm-up iteration of 9.0 s that harvest leaves out)
SAMPLED_RANKS = {0: [0.20, 0.22, 0.19, 0.21], 1: [0.21, 0.20, 0.23, 0.20]}


def _point(idx, **kw):
    row = dict(idx=idx, platform="v100", trainer="synthetic", experiment="weak_scaling", dataset="synthetic", gpus=1,
               nodes=1, repeat=0, batch_per_gpu=8, iterations=4, executor="slurm", state="completed",
               overrides=[f"seed={idx}"])
    row.update(kw)
    return row


def _rank(aid, rank, wall, iterations=4):
    return dict(attempt_id=aid, rank=rank, warmup_iterations=1, warmup_s=9.0, iterations=iterations, wall_s=wall,
                iter_mean_s=wall / iterations, iter_median_s=wall / iterations, images=8 * iterations,
                data_wait_s=0.1 * wall, compute_s=0.8 * wall, comm_s=0.1 * wall)


@pytest.fixture
def store(tmp_path):
    """Campaign CID: a full 1-GPU run requeued once (a failed attempt, then a completed
    one), a sampled 2-GPU run (4 of 400 iterations timed) and a point that only failed;
    campaign OTHER: one completed point, which CID's harvest must not read."""
    with open_store(f"sqlite:///{tmp_path}/store.db", create=True) as s:
        full, sampled, failed = s.register({"id": CID, "created_at": 1.0}, [
            _point(0), _point(1, gpus=2, experiment="projection", iterations=400), _point(2, gpus=4, state="failed")])
        (other,) = s.register({"id": OTHER, "created_at": 2.0}, [_point(0, platform="a100")])
        with s.engine.begin() as conn:
            conn.execute(insert(attempt), [
                dict(point_id=full, attempt_no=0, state="failed"), dict(point_id=full, attempt_no=1, state="completed"),
                dict(point_id=sampled, attempt_no=0, state="completed"), dict(point_id=failed, attempt_no=0, state="failed"),
                dict(point_id=other, attempt_no=0, state="completed")])
            ids = {(p, n): a for a, p, n in conn.execute(select(attempt.c.id, attempt.c.point_id, attempt.c.attempt_no))}
            conn.execute(insert(rank_timing), [
                _rank(ids[full, 0], 0, 99.0), _rank(ids[full, 1], 0, 10.0),
                _rank(ids[sampled, 0], 0, sum(SAMPLED_RANKS[0])), _rank(ids[sampled, 0], 1, sum(SAMPLED_RANKS[1])),
                _rank(ids[other, 0], 0, 5.0)])
            conn.execute(insert(profile), [dict(attempt_id=ids[full, 1], rank=0, iterations=2, total_s=1.0,
                                                cpu_s=0.3, device_s=0.6, gpu_util=0.6, cpu_util=0.3)])
            conn.execute(insert(iteration), [
                dict(attempt_id=ids[sampled, 0], rank=r, iter=i, warmup=i == 0, iter_s=9.0 if i == 0 else xs[i - 1])
                for r, xs in SAMPLED_RANKS.items() for i in range(len(xs) + 1)])
        s.ids = ids
        s.full_attempt, s.sampled_attempt = ids[full, 1], ids[sampled, 0]
        yield s


def test_each_completed_point_comes_from_its_latest_completed_attempt(store):
    df = point_frame(store, [CID])
    assert df["idx"].to_list() == [0, 1]  # the point that only failed has nothing to harvest
    full, sampled = df.row(0, named=True), df.row(1, named=True)
    assert full["attempt_id"] == store.full_attempt and full["time_s"] == 10.0 and full["ranks"] == 1
    assert not full["projected"] and full["time_lo_s"] is None
    assert full["gpu_util"] == 0.6 and full["compute_share"] == pytest.approx(0.8)
    assert sampled["gpu_util"] is None  # no profiler row: absent, not 0
    # sampled: slowest rank's window, projected to 400 iterations
    window = max(sum(xs) for xs in SAMPLED_RANKS.values())
    assert sampled["projected"] and sampled["sampled_time_s"] == window and sampled["ranks"] == 2
    assert sampled["time_s"] == pytest.approx(window / 4 * 400)
    # its interval: campaign_window's over the job's iterations (the slowest rank's at each), warm-up left out
    job = [max(a, b) for a, b in zip(*SAMPLED_RANKS.values())]
    half = window_interval(job, 400).halfwidth
    assert sampled["time_lo_s"] == pytest.approx(sampled["time_s"] * (1 - half), rel=1e-12)
    assert sampled["time_hi_s"] == pytest.approx(sampled["time_s"] * (1 + half), rel=1e-12)
    assert df.schema["time_s"].is_float() and df.schema["gpus"].is_integer() and df.schema["platform"] == pl.Utf8


def test_where_filters_select_points_before_anything_is_aggregated(store):
    assert point_frame(store, [CID], {"gpus": [2]})["idx"].to_list() == [1]
    assert point_frame(store, [CID], {"platform": ["a100"]}).height == 0
    assert point_frame(store, [OTHER])["platform"].to_list() == ["a100"]
    with pytest.raises(KeyError):
        completed_points_query([CID], {"colour": ["red"]})


def _container(image, sha256):
    return {"container": {"runtime": "apptainer", "image": image, "image_sha256": sha256}}


def test_image_of_the_harvested_attempt_labels_and_filters_points(store):
    """``image`` from the attempt's provenance JSON: the sha256's first 12 digits (the path
    where no sha256 was recorded, null without a container). ``image=`` takes a sha256
    prefix, a path or ``none``, bound (LIKE's wildcards are escaped), and matches the
    attempt harvest reads, not an earlier one."""
    new, old, path = "ab" * 32, "cd" * 32, "/img/a_100%.sif"
    cid = "20260103-000000-cccc"
    pts = store.register({"id": cid, "created_at": 3.0}, [_point(0), _point(1, gpus=2), _point(2, gpus=4)])
    with store.engine.begin() as conn:
        conn.execute(insert(attempt), [
            dict(point_id=pts[0], attempt_no=0, state="completed", provenance=_container("/img/old.sif", old)),
            dict(point_id=pts[0], attempt_no=1, state="completed", provenance=_container(path, new)),  # requeued
            dict(point_id=pts[1], attempt_no=0, state="completed", provenance=_container("docker://x:1", None)),
            dict(point_id=pts[2], attempt_no=0, state="completed", provenance={"container": None})])
        aids = conn.execute(select(attempt.c.id).where(attempt.c.point_id.in_(pts))).scalars().all()
        conn.execute(insert(rank_timing), [_rank(a, 0, 1.0) for a in aids])
    df = point_frame(store, [cid])
    assert df.select("idx", "image", "image_sha256", "image_path").rows() == [
        (0, new[:12], new, path), (1, "docker://x:1", None, "docker://x:1"), (2, None, None, None)]

    def idx(*images):
        return point_frame(store, [cid], {"image": list(images)})["idx"].to_list()

    assert idx(new[:6].upper()) == idx(new) == idx(path) == [0]
    assert idx(old[:12]) == [] and idx("/img/old.sif") == []  # the requeued attempt's image is not harvested
    assert idx("docker://x:1") == [1] and idx("none") == [2] and idx(new[:4], "none") == [0, 2]
    assert idx("%") == idx("ab%") == idx("_b") == idx("/img/a_100") == []  # values, not patterns
    assert point_frame(store, [cid], {"image": [new[:8]], "gpus": [2]}).height == 0


def test_job_iterations_are_the_slowest_rank_per_timed_iteration(store):
    with store.engine.connect() as conn:
        rows = conn.execute(job_iterations_query([store.sampled_attempt, store.full_attempt])).all()
    assert [r.iter_s for r in rows] == [max(a, b) for a, b in zip(*SAMPLED_RANKS.values())]


def _plan(store, stmt) -> list[str]:
    engine = store.engine
    compiled = stmt.compile(dialect=engine.dialect, compile_kwargs={"render_postcompile": True})
    params = compiled.construct_params()
    with engine.connect() as conn:
        rows = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + str(compiled),
                                    tuple(params[k] for k in compiled.positiontup)).all()
    return [r[-1] for r in rows]


def test_query_plans_read_only_the_campaigns_rows(store):
    plan = _plan(store, completed_points_query([CID], {"gpus": [1, 2], "image": ["ab12", "none"]}))
    # every table is searched by key; only the campaign's own intermediate results are scanned
    for table in ("point", "attempt", "rank_timing", "profile"):
        assert not any(f"SCAN {table} " in f"{line} " or f"SCAN TABLE {table} " in f"{line} " for line in plan), plan
        assert any(line.startswith(f"SEARCH {table} ") for line in plan), plan
    (line,) = _plan(store, job_iterations_query([store.sampled_attempt]))  # no table lookup, no sort
    assert "COVERING INDEX ix_iteration_job" in line, line


def test_a_sweep_of_the_mmseg_loop_harvests_as_two_named_series(store, tmp_path):
    """``trainer.params.loop=stock,lean`` (trainer=swinv2_upernet): two series, each named
    by its loop in a column of its own; stock's iterations time data and step only
    (MMEngine's run_iter is one call), so its step is stacked as forward + backward +
    step together, lean's as the optimizer step beside its forward and backward."""
    import csv
    import io
    import subprocess
    import sys

    from campaign.harvest.derive import engine_phases
    from campaign.harvest.utilisation import phase_stack
    from campaign_sql.schema import breakdown

    cid = "20260104-000000-dddd"
    grid = [(loop, gpus) for loop in ("stock", "lean") for gpus in (1, 2)]
    pts = store.register({"id": cid, "created_at": 4.0}, [
        _point(i, trainer="swinv2_upernet", gpus=gpus, overrides=[f"gpus={gpus}", f"trainer.params.loop={loop}"])
        for i, (loop, gpus) in enumerate(grid)])
    phases = {"stock": {"data": 0.02, "step": 0.30, "iteration": 0.32},
              "lean": {"data": 0.001, "forward": 0.08, "backward": 0.16, "step": 0.01, "iteration": 0.251}}
    with store.engine.begin() as conn:
        conn.execute(insert(attempt), [dict(point_id=p, attempt_no=0, state="completed") for p in pts])
        aid = dict(conn.execute(select(attempt.c.point_id, attempt.c.id).where(attempt.c.point_id.in_(pts))).all())
        conn.execute(insert(rank_timing), [_rank(aid[p], 0, 40.0 * phases[loop]["iteration"] / gpus)
                                           for p, (loop, gpus) in zip(pts, grid)])
        conn.execute(insert(breakdown), [dict(attempt_id=aid[p], rank=0, phase=ph, total_s=4 * s, mean_s=s, count=4)
                                         for p, (loop, _) in zip(pts, grid) for ph, s in phases[loop].items()])
    done = subprocess.run([sys.executable, "-m", "campaign", "harvest", cid, "--to", "csv", "--store",
                           f"sqlite:///{tmp_path}/store.db"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    rows = list(csv.DictReader(io.StringIO(done.stdout)))
    assert [(r["trainer.params.loop"], r["gpus"]) for r in rows] == [("lean", "1"), ("lean", "2"), ("stock", "1"),
                                                                     ("stock", "2")]
    assert all(r["note"] == "" or "no 1-GPU baseline" not in r["note"] for r in rows)  # each loop has its own

    points = point_frame(store, [cid])
    stack = phase_stack(points, engine_phases(store, points["attempt_id"].to_list()))
    got = {(v.split("=")[1], r["phase"], r["label"]) for v, r in zip(stack["variant"], stack.iter_rows(named=True))
           if r["gpus"] == 1}
    assert got == {("stock", "data", "data wait"), ("stock", "train_step", "forward + backward + step (not timed apart)"),
                   ("stock", "iteration", "iteration"), ("lean", "data", "data wait"), ("lean", "forward", "forward"),
                   ("lean", "backward", "backward (no all-reduce timed)"), ("lean", "step", "optimizer step"),
                   ("lean", "iteration", "iteration")}


def test_json_is_measured_before_any_json_function_reads_it():
    """Issue #48: SQLite's and PostgreSQL's JSON functions see a stored value only after its
    length (and its JSON, and the kind of the value at the figure's path) is checked: CASE
    tries its branches in order. The bound follows the command's JSON budget."""
    from sqlalchemy.dialects import postgresql, sqlite

    from campaign.common.bounded import ELEMENT_BYTES, Budget, memory, sql_max_chars
    from campaign.harvest.query import IMAGE_SHA256, extra

    for dialect, size, json_fn in ((sqlite.dialect(), "length(rank_timing.extra)", "JSON_EXTRACT"),
                                   (postgresql.dialect(), "octet_length(CAST(rank_timing.extra AS TEXT))", "->>")):
        sql = str(select(extra("mfu")).compile(dialect=dialect))
        assert sql.index(size) < sql.index(json_fn), sql
        assert sql.startswith(f"SELECT CASE WHEN ({size} > "), sql  # the first branch
    sql = str(select(IMAGE_SHA256).compile(dialect=sqlite.dialect()))
    assert sql.index("length(") < sql.index("json_valid(") < sql.index("json_type(") < sql.index("JSON_EXTRACT"), sql
    assert """json_type(attempt.provenance, '$."container"."image_sha256"') IN ('text')""" in sql
    default, small = sql_max_chars(Budget("X", 1024)), sql_max_chars(Budget("X", 64))
    assert (default, small) == (13_094_412, 818_400)
    assert memory("[" * small) <= 64 * 2**20 < memory("[" * (small + 1))  # every character an element
    assert ELEMENT_BYTES == 80 and sql_max_chars(Budget("X", 10**6)) == 64 * 2**20  # never past MAX_TEXT
