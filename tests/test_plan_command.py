"""``campaign plan`` (campaign/harvest/plan.py): the choices on a law whose optimum is known,
the launch line, and the command on a store (read only, exit codes)."""

from __future__ import annotations

import csv
import io

import polars as pl
import pytest

from campaign.harvest.model import model_table
from campaign.harvest.launchline import launch_line
from campaign.harvest.plan import candidates, choose
from test_model import frame, law
from test_states import CID, build


def _rows(coef):
    return candidates(model_table(frame([1, 2, 4, 8], coef)))


def test_plan_picks_the_known_optimum():
    # t(N) = 0.012/N + 0.001 log2 N seconds per image, 8000 images: the fastest N of 1..32 is 8
    rows = _rows((0.0, 0.012, 0.001, 0.0))
    t8 = law(8, 0.0, 0.012, 0.001, 0.0) * 8000 / 3600
    fastest = choose(rows, None, budget=1e9)["fastest"]
    assert (fastest["gpus"], fastest["kind"]) == (8, "measured") and fastest["time_h"] == pytest.approx(t8)
    # a budget below N=8's GPU-hours: the fastest that fits is N=4 (a hand count: 4 x T(4) < 8 x T(8))
    gh4 = law(4, 0.0, 0.012, 0.001, 0.0) * 8000 * 4 / 3600
    assert choose(rows, None, budget=gh4)["fastest"]["gpus"] == 4
    # the cheapest within a deadline: GPU-hours grow with N, so the smallest N that meets it
    t2 = law(2, 0.0, 0.012, 0.001, 0.0) * 8000 / 3600
    assert choose(rows, hours=t2, budget=None)["cheapest"]["gpus"] == 2
    assert choose(rows, hours=t8 / 2, budget=None)["cheapest"] is None


def test_predicted_points_are_marked_and_can_be_chosen():
    rows = _rows((0.0, 0.012, 0.0, 0.0))  # perfect scaling: the predicted 32 GPUs are fastest
    assert set(rows.filter(rows["gpus"] > 8)["kind"]) == {"predicted"}
    assert choose(rows, None, budget=1e9)["fastest"]["gpus"] == 32


def test_the_launch_line_runs_the_full_schedule():
    row = dict(platform="h100", trainer="vit", experiment="projection", variant="trainer.lr=0.1", gpus=8)
    assert launch_line(row, [("trainer.lr", "0.1")]) == ("campaign launch platform=h100 trainer=vit experiment=projection gpus=8 "
                                "experiment.sample_iterations=null trainer.lr=0.1")
    assert "'platform=a; b'" in launch_line(dict(row, platform="a; b", variant=""))
    assert launch_line(row).endswith("experiment.sample_iterations=null")  # overrides only as given


def test_plan_on_a_store_reads_and_says_why_two_points_are_not_enough(ws):
    build(ws.store_url, ws.results)
    before = ws.db.read_bytes()
    res = ws.campaign("plan", CID, "--budget", "1")
    assert res.returncode == 0, res.stderr
    assert "fewer than 3, no fit" in res.stderr and "Traceback" not in res.stderr
    assert res.stdout.startswith(f"campaign {CID}\nplan: ") and "fastest within 1.0 GPU-hours:" in res.stdout
    assert ws.db.read_bytes() == before


@pytest.mark.parametrize("argv,message", [(["--hours", "0"], "--hours 0.0: give a positive, finite number"),
                                          (["--budget", "inf"], "--budget inf: give a positive, finite number"),
                                          (["--hours", "nan"], "--hours nan: give a positive, finite number"),
                                          (["--efficiency-floor", "2"], "--efficiency-floor 2.0")])
def test_bad_input_is_one_line(ws, argv, message):
    build(ws.store_url, ws.results)
    res = ws.campaign("plan", *argv)
    assert res.returncode == 2 and res.stderr.startswith(f"error: {message}") and res.stderr.count("\n") == 1


@pytest.mark.slow
def test_the_model_table_on_two_points_says_why_there_is_no_fit(ws, tmp_path):
    # the main job's campaign shape: gpus=1,2 completed (test_states.build)
    build(ws.store_url, ws.results)
    before = ws.db.read_bytes()
    res = ws.campaign("harvest", CID, "--table", "model", "--to", "csv")
    assert res.returncode == 0, res.stderr
    (row,) = list(csv.DictReader(io.StringIO(res.stdout)))
    assert row["kind"] == "no fit" and row["note"].startswith("only 2 GPU count(s) (1, 2): fewer than 3, no fit")
    floored = ws.campaign("harvest", CID, "--table", "model", "--efficiency-floor", "0.5", "--plots",
                          str(tmp_path / "fig"))
    assert floored.returncode == 0, floored.stderr
    assert "knee: largest N with efficiency >= 0.5;" in floored.stdout and "fewer than 3, no fit" in floored.stdout
    assert not (tmp_path / "fig" / "model_fit.png").exists()  # no fit: no fit figure
    assert ws.db.read_bytes() == before


@pytest.mark.parametrize("argv,message", [
    (["--table", "model", "--efficiency-floor", "0"], "--efficiency-floor 0.0: give a number in (0, 1], e.g. 0.8"),
    (["--efficiency-floor", "0.7"], "--efficiency-floor goes with --table model (or all), not --table scaling")])
def test_harvest_efficiency_floor_bad_input_is_one_line(ws, argv, message):
    build(ws.store_url, ws.results)
    res = ws.campaign("harvest", *argv)
    assert res.returncode == 2 and res.stderr == f"error: {message}\n"


def test_an_inter_node_choice_launches_on_its_nodes():
    # an inter-node series measured at 8, 16 and 32 GPUs on 2, 4 and 8 nodes (4 GPUs each),
    # beside an intra-node one at 1, 2, 4: the printed line is the placement that was fitted
    from campaign.harvest.views import scaling_table
    from test_model import LAW

    points = pl.concat([frame([1, 2, 4], LAW)] + [frame([n], LAW, nodes=n // 4) for n in (8, 16, 32)])
    rows = candidates(model_table(points), scaling_table(points))
    inter = rows.filter(pl.col("span") == "inter-node")
    assert inter.select("gpus", "kind", "nodes").rows() == [
        (8, "measured", 2), (16, "measured", 4), (32, "measured", 8), (64, "predicted", 16), (128, "predicted", 32)]
    assert set(rows.filter(pl.col("span") == "intra-node")["nodes"]) == {1}
    line = launch_line(inter.filter(pl.col("gpus") == 64).row(0, named=True))
    assert "gpus=64 nodes=16 experiment.sample_iterations=null" in line
    assert "nodes=" not in launch_line(rows.filter(pl.col("gpus") == 16, pl.col("span") == "intra-node")
                                       .row(0, named=True))


def test_two_datasets_are_two_series_and_the_launch_line_names_its_own():
    """The same platform, trainer and schedule on two datasets (one 10x slower a step) plan
    as two series, each row naming its dataset, never two indistinguishable rows (review of
    2026-11-26); the launch line gives the series' own dataset overrides again."""
    from test_model import LAW

    fast = frame([1, 2, 4, 8], LAW).with_columns(pl.lit("cifar10 32px 10 classes").alias("dataset"))
    slow = frame([1, 2, 4, 8], tuple(10 * c for c in LAW)).with_columns(
        pl.lit("cifar100 32px 100 classes").alias("dataset"))
    rows = candidates(model_table(pl.concat([fast, slow])))
    four = rows.filter(pl.col("gpus") == 4).sort("dataset")
    assert four["dataset"].to_list() == ["cifar10 32px 10 classes", "cifar100 32px 100 classes"]
    assert four["gpu_hours"][1] == pytest.approx(10 * four["gpu_hours"][0])
    line = launch_line(four.row(1, named=True), [("dataset", "cifar100")])
    assert line == ("campaign launch platform=local trainer=sleep experiment=weak gpus=4 "
                    "experiment.sample_iterations=null dataset=cifar100")
