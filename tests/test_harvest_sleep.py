"""Harvest of real campaigns of the known-answer trainer (trainer=sleep), through the CLI.

The law (trainers/sleep.py): on N ranks the job spends t(N) = a/N + b*log2(N) + c
seconds per image. The campaign is weak scaling in the reference study's sense
(B images per GPU, base/N iterations), so every N processes the same base*B images:

- time to solution T(N) = base*B*t(N): speedup T(1)/T(N) = t(1)/t(N), efficiency = that/N;
- throughput: the job's images/s = 1/t(N), so the throughput speedup is the same
  t(1)/t(N), while a rank's iteration lasts N*B*t(N) (it grows with N: each
  iteration carries N times the images).

Both must come out of the real path (N processes, Recorder, store, SQL, polars)
within 1 %. The phases are the law's terms: data wait c, compute a/N, communication
b*log2(N), each over t(N).
"""

from __future__ import annotations

import csv
import io
import json
import math

import polars as pl
import pytest

from conftest import Workspace, campaign_id_from

A, B_COMM, C = 0.024, 0.002, 0.002  # seconds per image: parallel, per doubling, serial (E(4) = 0.54)
# the 4-GPU window 3.1 s: one late last wake-up (up to ~30 ms on a loaded machine) stays within 1 %
BATCH, BASE = 2, 128
GPUS = (1, 2, 4)
LAW = [f"trainer.params.a_s={A}", f"trainer.params.b_s={B_COMM}", f"trainer.params.c_s={C}",
       f"experiment.images_per_gpu={BATCH}", f"experiment.base_iterations={BASE}", "experiment.warmup_iterations=1"]
# the projected run times 16 of the 128 iterations at 1 GPU (0.83 s; with its warm-up 17/129 of the work); with
# 3, two late wake-ups on a loaded machine (the last one not made up by a later sleep) moved the projection 55 %
SAMPLE = 16


def t(n: int) -> float:
    return A / n + B_COMM * math.log2(n) + C


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The known-answer sweep (gpus=1,2,4) and a sampled run of its 1-GPU point."""
    ws = Workspace(tmp_path_factory.mktemp("sleep"))
    full = ws.launch("-m", "trainer=sleep", "gpus=1,2,4", "platform.gpus_per_node=4", "experiment=weak_scaling", *LAW)
    assert full.returncode == 0, full.stderr
    sampled = ws.launch("-m", "trainer=sleep", "gpus=1", "experiment=projection", f"experiment.sample_iterations={SAMPLE}",
                        *LAW)
    assert sampled.returncode == 0, sampled.stderr
    full_id, sampled_id = campaign_id_from(full.stdout), campaign_id_from(sampled.stdout)
    for cid in (full_id, sampled_id):
        wait = ws.campaign("status", cid, "--wait", "--interval", "2", "--timeout", "600", timeout=660)
        assert wait.returncode == 0, wait.stdout + wait.stderr
    return ws, full_id, sampled_id


@pytest.fixture(scope="module")
def tables(runs, tmp_path_factory) -> dict:
    """Every table of the full sweep as CSV from one harvest (``--table all --to csv --out``),
    read by the law's tests and by the every-format test: one harvest instead of one a table."""
    ws, full, _ = runs
    out = tmp_path_factory.mktemp("tables") / "csv"
    res = ws.campaign("harvest", full, "--table", "all", "--to", "csv", "--out", str(out))
    assert res.returncode == 0, res.stderr
    assert all(p.suffix == ".csv" for p in out.iterdir())
    return {p.stem: list(csv.DictReader(io.StringIO(p.read_text()))) for p in out.iterdir()}


def _csv(ws, *args) -> list[dict]:
    res = ws.campaign("harvest", *args, "--to", "csv")
    assert res.returncode == 0, res.stderr
    return list(csv.DictReader(io.StringIO(res.stdout)))


def _f(v: str):
    return None if v == "" else float(v)


@pytest.mark.slow
def test_time_to_solution_follows_the_law(tables):
    rows = {int(r["gpus"]): r for r in tables["scaling"]}
    assert sorted(rows) == list(GPUS) and {r["view"] for r in rows.values()} == {"time-to-solution"}
    for n, r in rows.items():
        assert float(r["time_s"]) == pytest.approx(BASE * BATCH * t(n), rel=0.01)
        assert float(r["speedup"]) == pytest.approx(t(1) / t(n), rel=0.01)
        assert float(r["efficiency"]) == pytest.approx(t(1) / t(n) / n, rel=0.01)
        assert float(r["ideal_speedup"]) == n and r["projected"] == "false" and r["note"] == ""


@pytest.mark.slow
def test_throughput_view_follows_the_law(tables):
    rows = {int(r["gpus"]): r for r in tables["throughput"]}
    assert {r["view"] for r in rows.values()} == {"throughput"}
    for n, r in rows.items():
        assert float(r["iter_s"]) == pytest.approx(n * BATCH * t(n), rel=0.01)
        assert float(r["images_per_s"]) == pytest.approx(1 / t(n), rel=0.01)
        assert float(r["throughput_speedup"]) == pytest.approx(t(1) / t(n), rel=0.01)
        assert float(r["throughput_efficiency"]) == pytest.approx(t(1) / t(n) / n, rel=0.01)
        assert float(r["ideal_images_per_s_per_gpu"]) == pytest.approx(1 / t(1), rel=0.01)


@pytest.mark.slow
def test_breakdown_shares_are_the_law_terms(tables):
    rows = tables["breakdown"]
    share = {(int(r["gpus"]), r["source"], r["phase"]): _f(r["share"]) for r in rows}
    # within 5 points of the law's: a whole-suite run's load makes a sleep wake late (its
    # phase longer, the others' shares smaller: 0.087 for the law's 0.125 was seen); a phase
    # counted as another would be off by 0.1 or more
    for n in GPUS:
        assert share[(n, "timed window", "data wait")] == pytest.approx(C / t(n), abs=0.05)
        assert share[(n, "timed window", "compute")] == pytest.approx(A / n / t(n), abs=0.05)
        comm = share[(n, "timed window", "communication")]
        assert comm is None if n == 1 else comm == pytest.approx(B_COMM * math.log2(n) / t(n), abs=0.05)
        assert share[(n, "profiler", "device")] is None  # no profiler window: absent, not zero
        assert share[(n, "phases", "iteration")] == pytest.approx(1.0, abs=0.01)  # the iterations tile the window
        assert share[(n, "phases", "forward")] == pytest.approx(A / n / t(n), abs=0.05)


@pytest.mark.slow
def test_utilisation_without_profiler_is_absent_not_zero(runs, tables):
    ws, full, _ = runs
    rows = tables["utilisation"]
    assert len(rows) == 3
    for r in rows:
        assert r["gpu_util"] == "" and r["cpu_util"] == ""
        assert r["note"] == "no profiler window (experiment.profile_iterations=0)"
    table = ws.campaign("harvest", full, "--table", "utilisation")
    assert "utilisation: GPU and CPU busy time / the profiler window's wall time (<= 1" in table.stdout and " -  " in table.stdout


@pytest.mark.slow
def test_projection_from_a_short_window_matches_the_full_run(runs):
    ws, full, sampled = runs
    (row,) = _csv(ws, sampled)
    assert row["projected"] == "true" and row["note"] == f"projected from {SAMPLE} of {BASE} iterations"
    assert _f(row["time_lo_s"]) <= float(row["time_s"]) <= _f(row["time_hi_s"])
    assert float(row["gpu_hours"]) > float(row["time_s"]) / 3600  # the warm-up is paid too
    cmp = {r["metric"]: r for r in _csv(ws, sampled, "--compare", full)}
    time = cmp["time_s"]  # matched on gpus, platform, trainer; experiments differ and are shown
    assert (time["experiment"], time["other_experiment"]) == ("projection", "weak_scaling")
    assert time["projected"] == "true" and time["other_projected"] == "false"
    assert abs(float(time["relative"])) < 0.03, time


@pytest.mark.slow
def test_reference_comparison_beside_measured(runs):
    ws, full, _ = runs
    rows = _csv(ws, full, "--compare", "reference")
    v100 = {int(r["gpus"]): r for r in rows if r["figure"].startswith("speedup_v100")}
    assert float(v100[2]["reference"]) == 1.43 and float(v100[4]["reference"]) == 1.46
    assert v100[2]["platform"] == "local" and v100[2]["platform_match"] == "false"
    assert float(v100[2]["measured"]) == pytest.approx(t(1) / t(2), rel=0.01)
    assert float(v100[2]["difference"]) == pytest.approx(float(v100[2]["measured"]) - 1.43)
    bound = next(r for r in rows if r["figure"] == "efficiency_4_below_half")
    assert float(bound["measured"]) == pytest.approx(t(1) / t(4) / 4, rel=0.01) and bound["holds"] == "false"
    pair = next(r for r in rows if r["figure"] == "a100_pcie_vs_v100")
    assert pair["measured"] == "" and float(pair["reference"]) == -0.24


@pytest.mark.slow
def test_every_table_in_every_format(runs, tables, tmp_path):
    ws, full, _ = runs
    names = ("scaling", "throughput", "utilisation", "breakdown", "hardware", "model")
    assert sorted(tables) == sorted(names)  # csv: the module's one harvest of them all
    for fmt, ext in (("json", "json"), ("markdown", "md"), ("parquet", "parquet"), ("table", "txt")):
        out = tmp_path / fmt
        res = ws.campaign("harvest", full, "--table", "all", "--to", fmt, "--out", str(out))
        assert res.returncode == 0, res.stderr
        assert sorted(p.name for p in out.iterdir()) == sorted(f"{n}.{ext}" for n in names)
    assert pl.read_parquet(tmp_path / "parquet" / "throughput.parquet").height == 3
    breakdown = pl.read_parquet(tmp_path / "parquet" / "breakdown.parquet")
    assert breakdown.filter(pl.col("source") != "phases").height == 3 * 7  # 3 summary + 4 profiler rows per N
    doc = json.loads(ws.campaign("harvest", full, "--table", "all", "--to", "json").stdout)
    assert sorted(doc) == sorted(names) and doc["scaling"][0]["view"] == "time-to-solution"
    md = ws.campaign("harvest", full, "--table", "all", "--to", "markdown").stdout
    assert md.count("## ") == len(names) and "| platform" in md


@pytest.mark.slow
def test_where_filters_are_bound_and_checked(runs):
    ws, full, _ = runs
    rows = _csv(ws, full, "--where", "gpus=1,4", "--table", "throughput")
    assert [r["gpus"] for r in rows] == ["1", "4"]
    hostile = ws.campaign("harvest", full, "--where", "platform=a'; drop table point; --", "--to", "csv")
    assert hostile.returncode == 1 and hostile.stdout == ""  # a value that matches nothing, not SQL
    bad = ws.campaign("harvest", full, "--where", "colour=red")
    assert bad.returncode == 2 and bad.stderr.startswith("error: --where 'colour=red'")
    assert ws.query("select count(*) from point")[0][0] == 4


@pytest.mark.slow
def test_plots_are_written_with_labelled_axes(runs, tmp_path):
    ws, full, _ = runs
    res = ws.campaign("harvest", full, "--plots", str(tmp_path / "fig"))
    assert res.returncode == 0, res.stderr
    from PIL import Image

    for name in ("training_time", "speedup", "efficiency", "throughput", "utilisation", "breakdown", "hardware"):
        with Image.open(tmp_path / "fig" / f"{name}.png") as im:
            im.verify()
            assert im.format == "PNG"
        assert (tmp_path / "fig" / f"{name}.svg").read_text().lstrip().startswith("<?xml")
    assert not (tmp_path / "fig" / "platform_comparison.png").exists()  # one platform: nothing to compare

    from campaign.harvest.derive import point_frame
    from campaign.harvest.plots import speedup_figure, time_figure
    from campaign.harvest.views import scaling_table
    from campaign.store import open_store

    with open_store(ws.store_url) as store:
        table = scaling_table(point_frame(store, [full]))
    ax = time_figure(table).axes[0]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("GPUs (N)", "training time (s)")
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "2", "4"]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["local", "ideal T(1)/N"]
    ax = speedup_figure(table).axes[0]
    assert ax.get_ylabel() == "speedup T(1)/T(N) (×)"
    assert list(ax.lines[0].get_ydata()) == pytest.approx([t(1) / t(n) for n in GPUS], rel=0.01)


@pytest.mark.slow
def test_breakdown_figure_stacks_each_runs_phases(runs):
    """One bar per GPU count stacking the sleep trainer's phases (data, forward, and from
    2 ranks its own comm phase), each the ranks' mean per iteration from the store; a
    phase a run never marked (comm on 1 rank) has no segment, not a zero one."""
    ws, full, _ = runs
    from campaign.harvest.derive import engine_phases, point_frame
    from campaign.harvest.plots_bars import breakdown_figure
    from campaign.harvest.utilisation import phase_stack
    from campaign.store import open_store

    with open_store(ws.store_url) as store:
        points = point_frame(store, [full])
        ax = breakdown_figure(phase_stack(points, engine_phases(store, points["attempt_id"].to_list()))).axes[0]
    stored = {(n, phase): 1000 * s for n, phase, s in ws.query(
        "select p.gpus, b.phase, avg(b.mean_s) from breakdown b join attempt a on a.id = b.attempt_id "
        "join point p on p.id = a.point_id where p.campaign_id = ? group by p.gpus, b.phase", full)}
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "2", "4"]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("GPUs (N)", "time per iteration (ms)")
    label = {"data wait": "data", "forward": "forward", "communication (trainer's own phase)": "comm_marked"}
    got = {(GPUS[round(r.get_x() + r.get_width() / 2)], label[c.get_label()]): r.get_height()
           for c in ax.containers for r in c.patches}
    assert sorted(got) == [(1, "data"), (1, "forward"), (2, "comm_marked"), (2, "data"), (2, "forward"),
                           (4, "comm_marked"), (4, "data"), (4, "forward")]
    assert got == pytest.approx({k: stored[k] for k in got}, rel=1e-9)
    tops = [sum(h for (n, _), h in got.items() if n == g) for g in GPUS]
    (iteration,) = ax.lines  # the phases tile the iteration (up to the end() call)
    assert list(iteration.get_ydata()) == pytest.approx(tops, rel=0.01)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "iteration (measured)", "communication (trainer's own phase)", "forward", "data wait"]


@pytest.mark.slow
def test_the_readmes_known_answer_block_is_this_campaigns_harvest(runs):
    """The manual's sleep-harvest block (scripts/readme_blocks.py) has the shape of this
    campaign's `campaign harvest` and the law's speedups and efficiencies."""
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("readme_blocks", root / "scripts" / "readme_blocks.py")
    rb = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rb)
    assert rb.SLEEP_LAW == ["trainer=sleep", "gpus=1,2,4", "platform.gpus_per_node=4", "experiment=weak_scaling",
                            *LAW[:3], *LAW[3:]]  # the same campaign as this module's
    ws, full, _ = runs
    shown = rb.all_blocks()["sleep-harvest"]
    printed = ws.campaign("harvest", full).stdout
    assert rb.shape(shown.split("\n", 1)[1]) == rb.shape(printed)
    lines = shown.splitlines()  # $ command, campaign, title, blank, header, rule, rows
    head = lines[4].split()
    rows = [dict(zip(head, ln.split())) for ln in lines[6:] if ln.strip()]
    assert [int(r["gpus"]) for r in rows] == list(GPUS)
    for r in rows:
        n = int(r["gpus"])
        assert float(r["speedup"]) == pytest.approx(t(1) / t(n), rel=0.02)
        assert float(r["efficiency"]) == pytest.approx(t(1) / t(n) / n, rel=0.02)
        assert float(r["time_s"]) == pytest.approx(BASE * BATCH * t(n), rel=0.02)
