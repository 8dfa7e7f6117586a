"""harvest --table convergence: known losses in, known rows out; the evaluation table
a version-4 store gains on upgrade."""

from __future__ import annotations

import sqlite3

import pytest

from campaign.harvest.convergence import epoch_bounds, per_iteration, point_rows
from campaign_sql.migrate import migrate
from campaign_sql.schema import SCHEMA_VERSION, metadata

pl = pytest.importorskip("polars")


def test_loss_is_the_mean_over_ranks_and_time_the_slowest():
    rows = [{"rank": 0, "iter": 0, "iter_s": 1.0, "loss": 2.0}, {"rank": 1, "iter": 0, "iter_s": 3.0, "loss": 4.0},
            {"rank": 0, "iter": 1, "iter_s": 1.0, "loss": 1.0}, {"rank": 1, "iter": 1, "iter_s": 0.5, "loss": None}]
    assert per_iteration(rows) == ([3.0, 1.0], [3.0, 1.0])


def test_known_answer_windows_epochs_and_threshold():
    loss = [4.0, 3.0, 2.0, 1.0, 0.5, 0.5]  # 6 iterations, 1 s each, epochs of 3
    secs = [1.0] * 6
    epochs = {0: {"iterations": 3, "epoch_s": 3.0, "train_accuracy": 0.25},
              1: {"iterations": 3, "epoch_s": 3.0, "test_loss": 0.9, "test_accuracy": 0.5, "test_images": 4}}
    rows = point_rows(loss, secs, epochs, threshold=1.5, windows=3)
    windows = [r for r in rows if r["unit"] == "window"]
    assert [(r["at"], r["iterations"], r["loss"], r["wall_s"], r["epoch"]) for r in windows] == [
        (0, 2, 3.5, 2.0, 0), (2, 4, 1.5, 4.0, 1), (4, 6, 0.5, 6.0, 1)]
    ep = [r for r in rows if r["unit"] == "epoch"]
    assert [(r["epoch"], r["loss"], r["wall_s"], r["train_accuracy"], r["test_accuracy"]) for r in ep] == [
        (0, 3.0, 3.0, 0.25, None), (1, pytest.approx(2 / 3), 6.0, None, 0.5)]
    # the first window whose mean is BELOW 1.5 is the third (the second's is 1.5, not below)
    assert {(r["to_threshold_iterations"], r["to_threshold_epochs"], r["to_threshold_s"]) for r in rows} == {(6, 2, 6.0)}


def test_never_below_the_threshold_and_no_threshold():
    rows = point_rows([2.0, 2.0], [1.0, 1.0], {}, threshold=1.0)
    assert {r["to_threshold_iterations"] for r in rows} == {None}
    assert {r["loss_threshold"] for r in point_rows([2.0], [1.0], {}, threshold=None)} == {None}


def test_epoch_bounds():
    assert epoch_bounds({1: 4, 0: 5, 2: 1}) == [(0, 0, 5), (1, 5, 9), (2, 9, 10)]


def test_a_version_4_store_gains_the_evaluation_table(tmp_path):
    from sqlalchemy import create_engine

    db = tmp_path / "v4.db"
    engine = create_engine(f"sqlite:///{db}")
    v4 = [t for name, t in metadata.tables.items() if name != "evaluation"]
    metadata.create_all(engine, tables=v4)
    with engine.begin() as conn:
        conn.exec_driver_sql("insert into meta (key, value) values ('schema_version', '4')")
    assert migrate(engine) == [4, 5]  # 5: job signatures
    con = sqlite3.connect(db)
    cols = [r[1] for r in con.execute("pragma table_info(evaluation)")]
    assert cols == ["attempt_id", "epoch", "split", "loss", "accuracy", "images", "seconds"]
    assert con.execute("select value from meta where key = 'schema_version'").fetchone()[0] == str(SCHEMA_VERSION)


def test_epoch_rows_share_the_whole_run_not_the_timed_window():
    """An epoch row spans warm-up and timed iterations (a GPU run's epoch_0 held 2.46 s
    against a 0.72 s timed window: share 3.39); its share is of the whole run, so every
    share of the breakdown stays <= 1 and the epochs' shares add up to 1."""
    from campaign.harvest.utilisation import breakdown_table

    p = pl.DataFrame([{"platform": "local", "trainer": "vit", "experiment": "profile", "variant": "", "gpus": 1,
                       "repeat": 0, "time_s": 0.72, "timed_iterations": 20, "iterations": 20, "attempt_id": 7}])
    eng = pl.DataFrame({"attempt_id": [7, 7, 7], "phase": ["epoch_0", "epoch_1", "iteration"],
                        "total_s": [2.46, 0.54, 0.72], "mean_s": [0.0984, 0.027, 0.036], "count": [25, 20, 20],
                        "share": [2.46 / 0.72, 0.54 / 0.72, 0.9983]})
    b = breakdown_table(p, eng).filter(pl.col("source") == "phases")
    share = dict(zip(b["phase"].to_list(), b["share"].to_list()))
    assert share == {"epoch_0": pytest.approx(2.46 / 3.0), "epoch_1": pytest.approx(0.54 / 3.0), "iteration": 0.9983}
    shares = breakdown_table(p, eng)["share"].drop_nulls().to_list()
    assert shares and all(0.0 <= s <= 1.0 for s in shares)


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_non_finite_loss_threshold_is_refused_in_one_line(value):
    # nan: every window's "mean < threshold" is False, so the table said never reached
    from campaign.common.errors import ConfigError
    from campaign.harvest.run import harvest

    with pytest.raises(ConfigError, match=r"^--loss-threshold (nan|inf): give a finite number, e\.g\. 0\.5$"):
        harvest(None, store_url="sqlite:////nonexistent/never-opened.db", table="convergence", loss_threshold=value)
