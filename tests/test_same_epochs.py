"""Strong scaling as the ViT study defines it (issue #46): the same epochs of the same data set
at every GPU count ("Strong scaling is achieved by fixing the workload by using the entire
dataset for increasing number of GPUs", vit-deepspeed-scaling.txt, section IV-A; "the model is
trained for 5 epochs for all experiments", ibid.), so a point whose images differ from its
1-GPU baseline's only by each epoch's dropped last batch (and the untimed warm-up) keeps its
speedup T(1)/T(N) and efficiency speedup/N; work that really differs still has none. The
expected numbers are worked out here from the study's schedule, not by campaign's code."""

from __future__ import annotations

import polars as pl
import pytest

from campaign.harvest.epochs import epoch_columns
from campaign.harvest.views import scaling_table

CIFAR = 50_000  # CIFAR-10's training split (its Table I)
EPOCHS, WARMUP, BATCH = 5, 5, 64  # conf/experiment/vit_strong.yaml, each cited there


def _config(gpus: int, epochs: int = EPOCHS, **exp) -> dict:
    return {"gpus": gpus, "dataset": {"name": "cifar10"},
            "experiment": {"epochs": epochs, "warmup_iterations": WARMUP, "scaling": "weak", **exp}}


def _timed(gpus: int, epochs: int = EPOCHS, images: int = CIFAR) -> int:
    """The study's schedule by hand: an epoch is images // (64 x N) iterations (the loader drops
    the partial batch), E epochs of them, the warm-up iterations among them untimed."""
    return epochs * (images // (BATCH * gpus)) - WARMUP


def _frame(times: dict[int, float], configs: dict[int, dict], iterations: dict[int, int]) -> pl.DataFrame:
    gpus = sorted(times)
    gb = [BATCH * n for n in gpus]
    rows = pl.DataFrame({"platform": "t4", "trainer": "vit", "experiment": "vit_strong", "dataset": "cifar10",
                         "variant": "", "gpus": gpus, "repeat": 0, "time_s": [times[n] for n in gpus],
                         "batch_per_gpu": BATCH, "iterations": [iterations[n] for n in gpus],
                         "timed_iterations": [iterations[n] for n in gpus], "global_batch": gb,
                         "images": [g * iterations[n] for g, n in zip(gb, gpus)]})
    return rows.with_columns(epoch_columns([configs[n] for n in gpus], gb, [iterations[n] for n in gpus]))


def test_the_full_vit_preset_keeps_its_speedup_at_8_gpus():
    times = {1: 7800.0, 2: 4000.0, 4: 2100.0, 8: 1150.0}
    its = {n: _timed(n) for n in times}
    assert (its[1] * BATCH, its[8] * 8 * BATCH) == (249_600, 245_760)  # the numbers: 1.5 % apart
    s = scaling_table(_frame(times, {n: _config(n) for n in times}, its)).sort("gpus")
    expected = [times[1] / times[n] for n in sorted(times)]
    assert s["speedup"].to_list() == pytest.approx(expected, rel=1e-9)
    assert s["efficiency"].to_list() == pytest.approx([v / n for v, n in zip(expected, sorted(times))], rel=1e-9)
    assert s["ideal_time_s"].to_list() == pytest.approx([times[1] / n for n in sorted(times)], rel=1e-9)
    eight = s.filter(pl.col("gpus") == 8).row(0, named=True)
    dropped_8, dropped_1 = CIFAR - (CIFAR // 512) * 512, CIFAR - (CIFAR // 64) * 64
    assert (dropped_8, dropped_1) == (336, 16)
    assert eight["note"] == (f"the same 5 epochs of 50,000 images as on 1 GPU, so speedup kept (245,760 timed images "
                             f"against 249,600: each epoch drops its last partial batch, {dropped_8} images here, "
                             f"{dropped_1} on 1 GPU; the warm-up iterations, untimed, take the rest)")
    assert s.filter(pl.col("gpus") == 1)["note"].to_list() == [""]


def test_the_small_twin_keeps_its_speedup_from_2_gpus_on():
    """conf/study/vit_deepspeed_small.yaml: 2 epochs of 0.2 % of CIFAR (100 images), 8 images per
    GPU, 1 warm-up iteration: 23 x 8 = 184 images at 1 GPU, 11 x 16 = 176 at 2 (4.3 % apart)."""
    share = round(CIFAR * 0.002)
    cfg = {n: {"gpus": n, "dataset": {"name": "cifar10", "fraction": 0.002},
               "experiment": {"epochs": 2, "warmup_iterations": 1, "scaling": "weak"}} for n in (1, 2)}
    its = {n: 2 * (share // (8 * n)) - 1 for n in (1, 2)}
    assert (its[1] * 8, its[2] * 16) == (184, 176)
    frame = _frame({1: 3.0, 2: 2.0}, cfg, its).with_columns(pl.col("gpus").mul(8).alias("global_batch"),
                                                             pl.lit(8).alias("batch_per_gpu"))
    frame = frame.with_columns(epoch_columns([cfg[1], cfg[2]], [8, 16], [its[1], its[2]]))
    s = scaling_table(frame).sort("gpus")
    assert s["speedup"].to_list() == pytest.approx([1.0, 3.0 / 2.0], rel=1e-9)
    assert s["efficiency"][1] == pytest.approx(3.0 / 2.0 / 2, rel=1e-9)
    assert s["note"][1].startswith("the same 2 epochs of 100 images as on 1 GPU")


def test_work_that_really_differs_has_no_speedup():
    times = {1: 100.0, 8: 20.0}
    # weak scaling by share (vit_weak: 10 % per GPU): 8 GPUs train 8 times the data
    weak = {n: _config(n, dataset_fraction_per_gpu=0.1) for n in times}
    its = {n: _timed(n, images=int(CIFAR * 0.1 * n)) for n in times}
    s = scaling_table(_frame(times, weak, its)).sort("gpus")
    assert s["speedup"][1] is None and s["note"][1].startswith("other images than on 1 GPU")
    # other epochs of the same data: no speedup either
    mixed = {1: _config(1, epochs=5), 8: _config(8, epochs=3)}
    its = {1: _timed(1), 8: _timed(8, epochs=3)}
    s = scaling_table(_frame(times, mixed, its)).sort("gpus")
    assert s["speedup"][1] is None and s["efficiency"][1] is None
    # a run cut short of whole epochs (iterations set by hand) is not "the same epochs"
    assert epoch_columns([_config(8)], [512], [_timed(8) - 1])[0].to_list() == [None]
