"""Each benchmark in benchmarks/ runs from its documented command at a tiny size and
prints its ratio line. Correctness only: timings on this shared machine are never asserted."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pg import drop_database

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "benchmarks"
RATIO = r"\d+\.\d\dx \(median of \d+ paired round"


def _run(script: str, *args: str, timeout: float = 300) -> str:
    proc = subprocess.run([sys.executable, str(BENCH / script), *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def _module(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up there
    path = list(sys.path)
    try:
        spec.loader.exec_module(mod)
    finally:  # run as a file, a script puts its own folder first on sys.path
        sys.path[:] = path
    return mod


def _needs_mmseg() -> None:
    """Skip without the training stack, importing nothing: importing mmseg here would set
    cv2's variables in this process's environment (the benchmark runs in its own)."""
    if importlib.util.find_spec("mmseg") is None:
        pytest.skip("the SwinV2 trainer needs the training stack (pip install -e '.[train]')")


def test_store_writes_prints_the_batched_over_per_row_ratio():
    out = _run("store_writes.py", "--rows", "300", "--rounds", "1")
    assert "300 iteration rows per write" in out
    assert re.search(r"batched/per-row rows/s: " + RATIO, out), out


def test_store_writes_with_concurrent_writers_counts_lost_and_doubled_rows():
    out = _run("store_writes.py", "--writers", "2", "--rows", "400", "--per-row-rows", "40", "--rounds", "1")
    assert "2 concurrent writer processes on one store, SQLite WAL" in out, out
    assert re.search(r"batched/per-row aggregate rows/s: " + RATIO, out), out
    # counted from the store after every round: every writer's rows, once
    assert "rows lost: 0, doubled: 0, writers that spooled: 0 (of 4 writer runs" in out, out
    assert re.search(r"batched (meets|MISSES) the 100,000 rows/s goal here", out), out


@pytest.mark.postgres
def test_store_writes_with_concurrent_writers_on_postgresql():
    sqlalchemy = pytest.importorskip("sqlalchemy")
    import os
    import uuid

    admin_url = os.environ.get("CAMPAIGN_TEST_PG", "postgresql+psycopg2://campaign:campaign@127.0.0.1:15432/campaign")
    name = f"campaign_bench_{uuid.uuid4().hex[:8]}"
    try:
        admin = sqlalchemy.create_engine(admin_url, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    except Exception as exc:
        pytest.skip(f"no PostgreSQL at {admin_url} ({type(exc).__name__}); start it with bash scripts/local-postgres.sh start")
    try:
        url = admin_url.rsplit("/", 1)[0] + "/" + name
        out = _run("store_writes.py", "--writers", "2", "--rows", "300", "--per-row-rows", "30", "--rounds", "1",
                   "--store", url)
        assert "postgresql+psycopg2 (--store)" in out and "rows lost: 0, doubled: 0" in out, out
        assert "the 100,000 rows/s goal is SQLite's; this store is not judged against it" in out, out
    finally:
        drop_database(admin, name)
        admin.dispose()


@pytest.mark.slow
def test_harvest_scale_agrees_with_its_pandas_baseline():
    pytest.importorskip("pandas", reason="the baseline needs pandas (pip install -e '.[test]')")
    # 80 points: two repeats of each of 40 (harvest takes the median over a point's repeats;
    # a combination some of whose repeats are sampled runs is two series: 60 rows)
    out = _run("harvest_scale.py", "--points", "80", "--iterations", "16000", "--rounds", "1", "--explain",
               "--profile", "3")
    # weak scaling: 8 x gpus x timed iterations is the same for every GPU count (at most 16,000 rows)
    assert "store: 80 completed points" in out and re.search(r"1[2-5],\d{3} iteration rows", out), out
    # the fair peer (harvest's own SQL and bootstrap in pandas), and what the SQL design saves
    assert "pandas baseline with harvest's own SQL and interval (only the data-frame library differs)" in out
    assert re.search(r"pandas/harvest wall time \(fresh process each\): " + RATIO, out), out
    assert re.search(r"naive read/same SQL wall time: " + RATIO, out), out
    assert re.search(r"harvest (meets|MISSES) the 1 s target here", out), out
    # both baselines compute the same per-point aggregates: every CSV holds the same numbers
    assert "CSVs (same SQL) agree: 60 rows" in out and "CSVs (naive)    agree: 60 rows" in out, out
    assert "job_iterations_query:" in out and "completed_points_query:" in out
    assert "in-process harvest (imports warm), under cProfile" in out


@pytest.mark.parametrize("n", [1, 2, 10, 12, 100, 1000, 7])
def test_launch_sweep_has_exactly_n_valid_points(n):
    over = dict(o.split("=", 1) for o in _module("launch").sweep(n))
    platforms, gpus = over["platform"].split(","), [int(g) for g in over["gpus"].split(",")]
    seeds = int(re.fullmatch(r"range\(0,(\d+)\)", over["seed"]).group(1))
    assert len(platforms) * len(gpus) * seeds == n
    assert max(gpus) <= 4  # every platform holds it on one node of the test cluster


def _launch_skip_reason() -> str | None:
    if importlib.util.find_spec("hydra_plugins.hydra_submitit_launcher") is None:
        return "hydra-submitit-launcher not installed (pip install -e '.[test]')"
    if shutil.which("sbatch") is None:
        return "SLURM client tools not installed (sudo bash scripts/local-slurm.sh start)"
    status = subprocess.run(["bash", str(REPO / "scripts" / "local-slurm.sh"), "status"], capture_output=True, timeout=60)
    if status.returncode != 0:
        return "local SLURM cluster not up (sudo bash scripts/local-slurm.sh start)"
    return None


@pytest.mark.slurm
@pytest.mark.slow
def test_launch_compares_both_launchers_and_leaves_no_job():
    why = _launch_skip_reason()
    if why:
        pytest.skip(why)
    out = _run("launch.py", "--sizes", "2", "--rounds", "1", timeout=600)
    assert "N=2  sweep: platform=v100,a100 gpus=1 seed=range(0,1) experiment=smoke" in out, out
    assert "campaign: 2 sbatch (one array per resource group), 2 array tasks; hydra: 1 sbatch, 2 array tasks" in out, out
    assert re.search(r"hydra/campaign time to first sbatch: " + RATIO, out), out
    assert re.search(r"hydra/campaign time to return \(its N trivial jobs run\): " + RATIO, out), out
    ids = re.search(r"scancelled every job this run submitted: ([\d,]+)", out).group(1).split(",")
    assert len(ids) == 3  # campaign's two arrays, Hydra's one
    left = subprocess.run(["squeue", "-h", "-t", "PD,R", "-j", ",".join(ids), "-o", "%i %T"], capture_output=True,
                          text=True, timeout=60).stdout
    assert left.strip() == "", left


@pytest.mark.slow
def test_projection_runs_its_pairs_and_prints_the_error_distribution(tmp_path):
    out = _run("projection.py", "--trainers", "sleep", "--size", "0.2", "--pairs", "1", timeout=600)
    assert "sleep trainer (its law slept to absolute deadlines: the exactness check)" in out, out
    m = re.search(r"^   1  full,sampled +([\d.]+) +([\d.]+) \+- *[\d.]+ % +([-+][\d.]+) %  (yes|NO) ", out, re.M)
    assert m, out
    full, projected, error = float(m.group(1)), float(m.group(2)), float(m.group(3))
    assert error == pytest.approx(100 * (projected / full - 1), abs=0.5)  # the times are printed to 10 ms
    assert abs(error) < 20  # the sleep law: a projection cannot miss by much (8.7 % under a 4-worker suite's load)
    assert re.search(r"\|error\| <= 3 % in [01] of 1 pairs \(goal >= 90 %: (met|MISSED)\)", out), out
    assert re.search(r"coverage of the stated 95 % interval: [01] of 1 pairs", out), out
    assert re.search(r"compute spent by the sampled run: median [\d.]+ % of the full run's \(start-up alone", out)
    assert "prefix (the rule on each full run's own first iterations" in out
    assert re.search(r"the full runs' own rate, slowest tenth over fastest tenth: median [\d.]+x", out), out
    assert "the full runs themselves (the same job in 1 process(es))" in out


def test_projection_sets_the_errors_beside_how_far_apart_the_full_runs_are():
    """Known answer: full runs of 100, 102 and 110 s are 2 %, 10 % and 7.84 % apart; one
    pair of runs of three is within 3 %; their sample standard deviation is sqrt(56 / 2) = 5.29 s, 5.1 % of 104."""
    proj = _module("projection")
    pairs = [dict(full_s=f, error=0.01, covered=True, spent=0.04, spent_no_startup=0.03, startup_share=0.01,
                  prefix=0.0, spread=1.0) for f in (100.0, 102.0, 110.0)]
    lines, figs = proj.summary("t", pairs)
    assert lines[-1].startswith("the full runs themselves (the same job in 3 process(es)): slowest / fastest 1.100x, "
                                "coefficient of variation 5.1 %; two of them within 3 % of each other in 1 of 3 ")
    by_key = {f["key"]: f for f in figs}
    assert by_key["t.full_apart"]["runs"] == pytest.approx([2.0, 10.0, 100 * (110 / 102 - 1)])
    assert by_key["t.full_near"]["runs"] == pytest.approx([100 / 3])


@pytest.fixture(scope="module")
def overhead_run() -> str:
    """One run of the overhead benchmark read by three tests, every printed line of it at
    once: ``--step-ms`` below any step (the calibration takes its first size), new copies
    every 5 pairs (3 sets: the interval over the sets), and the Python hook and the control
    beside the C++ one (``--also``). The one-set form of the A/B line: below, in-process."""
    return _run("overhead.py", "--step-ms", "0.001", "--pairs", "15", "--fresh", "5", "--steps", "1",
                "--also", "python,none", "--accounting-pairs", "3")


@pytest.mark.slow
def test_overhead_prints_the_ab_ratio_and_the_accounted_cost(overhead_run):
    out = overhead_run
    # new copies every 5 pairs: 3 sets, the interval over them (each set's trimmed mean)
    m = re.search(r"instrumented/bare step time: \d+\.\d{3} \(15 pairs over 3 sets of fresh copies; 95% CI over "
                  r"the sets [\d.]+-[\d.]+ \(over the pairs alone [\d.]+-[\d.]+\); "
                  r"half-width [\d.]+ %, (target met|--pairs 15 reached); bare [\d.]+ ms/step; 2 rank\(s\) on cpu, "
                  r"width 8, depth 2, 4x8x8 images/rank", out)
    assert m, out
    # the accounted cost may come out below 0 on a noisy machine (the hook's part is a difference)
    m = re.search(r"accounted: (-?[\d.]+) us/step = (-?[\d.]+)% of the bare step \(Recorder ([\d.]+) us/step \+ "
                  r"cpp hook (-?[\d.]+) us/bucket \[95% CI .*\] x (\d+) bucket\(s\)/step; budget 1%: (met|NOT met)\)", out)
    assert m, out  # the C++ hook: what a CPU job times its all-reduce with (trainers/comm_cpp.py)
    assert int(m.group(5)) >= 1  # 2 DDP ranks: the default model's gradients go in at least one bucket
    assert float(m.group(3)) > 0
    assert re.search(r"^A/B and accounted (agree|DISAGREE): ", out, re.M), out


def test_overhead_says_what_an_interval_over_the_pairs_leaves_out():
    """With fewer than three sets of copies the A/B interval is the pairs' own, and the line
    says the copies' difference is not in it (a run of one set: ``--fresh`` above ``--pairs``)."""
    ab_interval = _module("overhead").ab_interval
    assert ab_interval(10, 1, 0.99, 1.0123, 0.98, 1.02) == (
        "10 pairs, 1 set(s) of copies; 95% CI 0.990-1.012, the copies' own difference not in it")
    assert ab_interval(1200, 12, 0.999, 1.009, 1.001, 1.007) == (
        "1,200 pairs over 12 sets of fresh copies; 95% CI over the sets 0.999-1.009 (over the pairs alone 1.001-1.007)")


@pytest.mark.slow
def test_overhead_measures_the_python_hook_beside_the_cpp_one(overhead_run):
    out = overhead_run
    assert "the hook: C++ (trainers.comm_cpp), x 1/world, then SUM" in out, out
    assert re.search(r"^  beside it, the python hook \(--also\): step time \d+\.\d{3} \(95% CI [\d.]+-[\d.]+\), "
                     r"CPU time \d+\.\d{3} .*over the same bare blocks$", out, re.M), out
    # the control: the instrumented copy's loop with nothing timed, and the instrumented copy over it
    ratios = dict(re.findall(r"^(instrumented/bare|  beside it, the control .*?|instrumented/control) step time:? "
                             r"(\d+\.\d{3})", out, re.M))
    assert len(ratios) == 3, out
    a, c, ac = (float(v) for v in ratios.values())  # per round log(a/b) - log(c/b): the means agree to rounding
    assert ac > 0 and a > 0 and c > 0, out


@pytest.mark.slow
def test_overhead_step_ms_times_the_bare_step_to_choose_the_image_size(overhead_run):
    # a target below any step: the first size tried is already past it, and is the nearest
    out = overhead_run
    m = re.search(r"^calibrated: --image-size 8 gives a ([\d.]+) ms bare step here \(target 0\.001 ms; tried 8: ([\d.]+)\); not within 20 % of it: "
                  r"another --depth, --batch or --width gets nearer$",
                  out, re.M)
    assert m and float(m.group(1)) == float(m.group(2)) > 0, out
    assert re.search(r"bare [\d.]+ ms/step; 2 rank\(s\) on cpu, width 8, depth 2, 4x8x8 images/rank", out), out


def test_overhead_takes_each_set_of_copies_apart():
    overhead = _module("overhead")
    nan = float("nan")
    # three sets starting at pairs 0, 3, 5: [1, 2, 3], [10, nan] and [7, 8, 9, 10, 100]
    # (20 % trimmed: one value off each end of five)
    values = [1.0, 2.0, 3.0, 10.0, nan, 7.0, 8.0, 9.0, 10.0, 100.0]
    assert overhead.per_set(values, [0, 3, 5]) == pytest.approx([2.0, 10.0, 9.0])
    assert overhead.per_set(values, [0]) == pytest.approx([_module("_common").trimmed_mean_ci(
        [v for v in values if v == v])[0]])
    assert overhead.per_set([nan, nan, 1.0], [0, 2]) == [1.0]  # a set with nothing left gives nothing


def test_overhead_step_ms_takes_the_size_nearest_the_target():
    overhead = _module("overhead")
    asked = []

    def measure(size):  # a step of 0.1 ms a pixel row + 0.05 ms: size 24 gives 2.45 ms, 26 gives 2.65
        asked.append(size)
        return 1e-4 * size + 5e-5

    found = overhead.choose_size(measure, 2.5e-3)
    assert asked == list(range(8, 27, 2))  # stops at the first size past the target
    assert found["image_size"] == 24 and found["step_s"] == pytest.approx(2.45e-3)
    assert found["tried"][-1] == (26, pytest.approx(2.65e-3))
    # every rank follows rank 0: a rank whose own clock says "past" goes on while rank 0 says no
    asked.clear()
    found = overhead.choose_size(measure, 2.5e-3, agree=lambda past: len(asked) >= 3)
    assert asked == [8, 10, 12] and found["image_size"] == 12
    asked.clear()  # a target beyond every size: the largest tried
    assert overhead.choose_size(measure, 1.0)["image_size"] == overhead.CALIBRATION_SIZES[-1]


@pytest.mark.parametrize("args, says", [
    (["--step-ms", "2.5", "--image-size", "16"], "--step-ms chooses the image size"),
    (["--step-ms", "0"], "--step-ms takes a step in milliseconds"),
    (["--step-ms", "2.5", "--presets", "3ms"], "not both"),
    (["--step-ms", "2.5", "--depth", "9"], "take --depth <= 7"),
    (["--step-ms", "2.5", "--batch", "-1"], "whole numbers >= 1"),
    (["--step-ms", "2.5", "--batch", "0"], "whole numbers >= 1"),
    (["--width", "0"], "whole numbers >= 1"),
    (["--fresh", "-1"], "--fresh takes a number of pairs"),
])
def test_overhead_refuses_a_step_it_cannot_calibrate(args, says):
    done = subprocess.run([sys.executable, str(BENCH / "overhead.py"), *args], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode != 0 and says in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_overhead_refuses_a_hook_it_does_not_know():
    done = subprocess.run([sys.executable, str(BENCH / "overhead.py"), "--also", "fortran"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "--also 'fortran'" in done.stderr and "Traceback" not in done.stderr
    assert "none: a control" in done.stderr


@pytest.mark.slow
def test_trainer_vs_plain_times_both_loops_and_the_data_wait_against_one_plain_loop():
    """One run of both loops (each run builds SwinV2 and UPerNet thrice: most of its cost)."""
    _needs_mmseg()
    out = _run("trainer_vs_plain.py", "--pairs", "2", "--steps", "1", "--warmup", "1", "--image-size", "64",
               "--loops", "lean,stock")
    lean = re.search(r"trainer/plain step time: (\d+\.\d{3}) \(median of 2 pairs; 95% CI [\d.]+-[\d.]+; plain ([\d.]+) "
                     r"ms/step, trainer ([\d.]+) ms/step; cpu, SwinV2-micro \+ UPerNet, 2x64x64, fp32; goal on a GPU "
                     r"<= 1\.05: (met|NOT met)\)", out)
    stock = re.search(r"stock/plain step time: [\d.]+ \(median of 2 pairs; 95% CI [\d.]+-[\d.]+; plain ([\d.]+) "
                      r"ms/step, stock ([\d.]+) ms/step; cpu, SwinV2-micro \+ UPerNet, 2x64x64, fp32; MMEngine's own "
                      r"loop: no goal\)", out)
    assert lean and stock, out
    assert float(lean.group(2)) > 0 and float(lean.group(3)) > 0
    assert lean.group(2) == stock.group(1) and float(stock.group(2)) > 0  # one plain loop for both
    m = re.search(r"trainer phases: data ([\d.]+)%, forward ([\d.]+)%, backward ([\d.]+)%, step ([\d.]+)% of its step; "
                  r"data wait goal < 1%: (met|NOT met)", out)
    assert m, out
    assert sum(float(m.group(i)) for i in range(1, 5)) == pytest.approx(100, abs=1)  # the phases tile the step
    m = re.search(r"stock phases: data ([\d.]+)%, step ([\d.]+)% of its step \(run_iter: forward, backward and update "
                  r"in one phase\)", out)
    assert m and float(m.group(1)) + float(m.group(2)) == pytest.approx(100, abs=1), out
    assert out.index("trainer/plain") < out.index("stock/plain")


def test_trainer_vs_plain_refuses_an_unknown_loop():
    done = subprocess.run([sys.executable, str(BENCH / "trainer_vs_plain.py"), "--loops", "lean,fancy"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "--loops takes distinct values of lean, stock, got 'lean,fancy'" in done.stderr
    assert "Traceback" not in done.stderr
