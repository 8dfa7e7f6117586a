"""Known-answer tests of the harvest's derivations (no jobs: rows built by hand)."""

from __future__ import annotations

import polars as pl
import pytest

from campaign.harvest.derive import scaling_table, variants


def _frame(times: dict[int, list[float]], platform="v100"):
    rows = []
    for gpus, ts in times.items():
        for rep, t in enumerate(ts):
            rows.append({"platform": platform, "trainer": "synthetic", "experiment": "weak_scaling", "variant": "",
                         "gpus": gpus, "repeat": rep, "time_s": t, "images": 1000, "iter_median_s": t / 10,
                         # weak scaling, as the study: 8 images per GPU, 40/N iterations (the same images)
                         "batch_per_gpu": 8, "iterations": 40 // gpus, "gpu_util": None, "cpu_util": None})
    return pl.DataFrame(rows)


def test_speedup_and_efficiency_follow_eq_3_1_and_3_2():
    t = scaling_table(_frame({1: [100.0], 2: [60.0], 4: [40.0]}))
    got = {r["gpus"]: (r["speedup"], r["efficiency"]) for r in t.iter_rows(named=True)}
    assert got[1] == (1.0, 1.0)
    assert got[2] == pytest.approx((100 / 60, 100 / 60 / 2))
    assert got[4] == pytest.approx((2.5, 0.625))


def test_repeats_use_the_median():
    t = scaling_table(_frame({1: [100.0, 90.0, 300.0], 2: [50.0, 55.0, 45.0]}))
    row = t.filter(pl.col("gpus") == 2).row(0, named=True)
    assert row["repeats"] == 3 and row["time_s"] == 50.0 and row["time_min_s"] == 45.0 and row["time_max_s"] == 55.0
    assert row["speedup"] == pytest.approx(100.0 / 50.0)


def test_platforms_are_separate_series():
    df = pl.concat([_frame({1: [100.0], 2: [50.0]}, "v100"), _frame({2: [30.0]}, "a100")])
    t = scaling_table(df)
    a100 = t.filter(pl.col("platform") == "a100").row(0, named=True)
    assert a100["speedup"] is None and a100["note"] == "no 1-GPU baseline"
    assert t.filter(pl.col("platform") == "v100")["speedup"].to_list() == [1.0, 2.0]


def test_absent_utilisation_stays_absent():
    t = scaling_table(_frame({1: [10.0]}))
    assert t["gpu_util"].to_list() == [None]


def test_variant_is_what_differs_between_points():
    got = variants([
        ["platform=v100", "gpus=1", "trainer.optimizer=adamw", "seed=1", "experiment.base_iterations=9"],
        ["platform=a100", "gpus=2", "trainer.optimizer=sgd", "seed=1", "experiment.base_iterations=9"],
    ])
    assert got == ["trainer.optimizer=adamw", "trainer.optimizer=sgd"]
