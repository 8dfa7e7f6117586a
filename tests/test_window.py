"""Known answers of the sampled window's statistics (campaign/harvest/window.py) and of
the job's sampler (trainers/sampling.py) on a real Recorder."""

from __future__ import annotations

import math
import random
import time

import pytest

from campaign.harvest.window import (batches, mser_truncation, t_quantile, warmed_up, window_interval)


def test_t_quantile_known_values():
    assert t_quantile(1) == 12.706 and t_quantile(9) == 2.262 and t_quantile(30) == 2.042
    assert t_quantile(60) == pytest.approx(2.000, abs=1e-3)  # Cornish-Fisher beyond the table
    assert t_quantile(120) == pytest.approx(1.980, abs=1e-3)
    assert t_quantile(10**6) == pytest.approx(1.95996, abs=1e-4)  # the normal quantile
    assert t_quantile(20, level=0.90) == pytest.approx(1.725, abs=2e-3)
    with pytest.raises(ValueError):
        t_quantile(0)
    stats = pytest.importorskip("scipy.stats")
    for df in (1, 2, 5, 29, 31, 45, 200, 5000):
        assert t_quantile(df) == pytest.approx(stats.t.ppf(0.975, df), abs=1e-3)


def test_mser_drops_the_transient_and_the_warm_up_rule_waits_for_it():
    settled = [1.0, 1.1, 0.9, 1.0, 1.05, 0.95] * 10  # 60 values around 1
    series = [5.0] * 10 + settled
    assert mser_truncation(series) == 10  # the two batches of 5 slow iterations
    assert mser_truncation(settled) == 0
    assert mser_truncation([1.0] * 9) == 0  # fewer than two batches: nothing to drop
    assert warmed_up(series)  # truncation 10 of 70: in the first half
    assert not warmed_up([5.0] * 10 + settled[:6])  # 10 of 16 values: too few to tell (< 4 batches)
    assert not warmed_up([5.0] * 15 + settled[:10])  # truncation 15 of 25: past the first half, wait
    assert not warmed_up(series[:19])  # < 4 batches


def test_batches_at_least_ten_or_one_per_iteration():
    assert batches(1) == (1, 1) and batches(4) == (4, 1) and batches(10) == (10, 1)
    assert batches(64) == (10, 6) and batches(400) == (20, 20) and batches(10_000) == (100, 100)


def test_window_interval_of_independent_iterations_is_the_t_interval_of_batch_means():
    xs = [0.19, 0.21, 0.2, 0.2, 0.18, 0.22, 0.2, 0.2, 0.19, 0.21]  # 10 batches of 1
    w = window_interval(xs)
    sd = math.sqrt(sum((x - 0.2) ** 2 for x in xs) / 9)
    assert w.k == 10 and w.batches == 10 and w.mean == pytest.approx(0.2) and w.t == 2.262
    assert w.noise == pytest.approx(2.262 * sd / math.sqrt(10) / 0.2)
    # the level estimate: the last 8 batch means in 4 groups of 2
    assert w.drift is not None and w.halfwidth == pytest.approx(math.hypot(w.noise, w.drift))
    short = window_interval(xs[:7])
    assert short.drift is None and short.halfwidth == short.noise  # 7 batches: fewer than two per group
    assert window_interval(xs[:7], 1000).halfwidth == pytest.approx(short.noise * math.sqrt(1 + 7 / 1000))
    assert window_interval([0.3]) is None and window_interval([]) is None
    flat = window_interval([0.5] * 400)
    assert flat.halfwidth == 0.0 and flat.drift == 0.0 and flat.batches == 20


def test_window_interval_uses_the_last_whole_batches():
    xs = [9.0] * 4 + [1.0, 2.0] * 30  # 64 values: 10 batches of 6, the 4 oldest dropped
    w = window_interval(xs)
    assert w.batches == 10 and w.mean == pytest.approx(1.5) and w.noise == 0.0


def test_a_level_change_inside_the_window_widens_the_interval():
    rnd = random.Random(5)
    steady = [1.0 + 0.05 * rnd.gauss(0, 1) for _ in range(1600)]
    shifted = [x + (0.2 if i >= 800 else 0.0) for i, x in enumerate(steady)]
    a, b = window_interval(steady), window_interval(shifted)
    assert a.batches == 40 and a.halfwidth < 0.01  # 1,600 iterations of 5 % noise: within 1 %
    # one-way random effects over 4 groups of 10 batch means: the level's variance is there
    assert b.drift > 5 * a.halfwidth and b.halfwidth == pytest.approx(math.hypot(b.noise, b.drift), rel=0.05)
    # the batch means alone would see a mere ~2 %: the drift term is what makes it honest
    assert b.noise < 0.03 and b.halfwidth > 0.08


def test_interval_coverage_under_independent_noise_is_near_its_level():
    """400 windows of 256 i.i.d. iterations: the stated 95 % covers the true mean in
    roughly 95 % of them (the drift term adds a little width when there is no drift)."""
    rnd = random.Random(11)
    hits = 0
    for _ in range(400):
        w = window_interval([1.0 + 0.1 * rnd.gauss(0, 1) for _ in range(256)])
        hits += abs(w.mean - 1.0) <= w.halfwidth * w.mean
    assert 0.92 <= hits / 400 <= 1.0


# ------------------------------------------------------------------ the job's sampler


class _Sleeper:
    """A trainer whose iterations sleep: ``slow_s`` for the first ``slow`` ones, then ``fast_s``."""

    images_per_step = 1

    def __init__(self, slow: int, slow_s: float, fast_s: float):
        self.slow, self.slow_s, self.fast_s, self.i = slow, slow_s, fast_s, 0

    def step(self, rec):
        time.sleep(self.slow_s if self.i < self.slow else self.fast_s)
        self.i += 1
        rec.mark("forward")
        return None


def _sample(trainer, **rule):
    torch = pytest.importorskip("torch")
    from trainers.instrument import Recorder
    from trainers.sampling import SampleRule, WindowSampler

    plan = {"warmup": rule.pop("warmup", 2), "iterations": rule.pop("cap", 300),
            "sample": {"halfwidth": rule.pop("halfwidth", 0.05), "max_warmup": rule.pop("max_warmup", 200),
                       "full_iterations": 100_000}}
    rec = Recorder(torch.device("cpu"), warmup=plan["warmup"])
    sampler = WindowSampler(SampleRule.from_plan(plan), rec, lambda flag: flag)
    sampler.run(trainer)
    rows = rec.rows()
    return rec, rows, sampler.extra(rows)


def test_sampler_opens_the_window_after_the_transient_and_measures_it():
    rec, rows, extra = _sample(_Sleeper(slow=15, slow_s=0.012, fast_s=0.002), cap=80, halfwidth=0.0001)
    d = rec.warmup
    # MSER at the first check (20 iterations, 15 slow) takes the transient for a level; the
    # rule wants two settled checks in a row, and the second one sees the transient's end
    assert 30 <= d <= 60 and extra["sample_warmup"] == "settled"
    assert extra["sample_planned_warmup"] == 2 and extra["sample_transient_iterations"] == d - 2
    assert extra["sample_transient_s"] == pytest.approx(sum(r["iter_s"] for r in rows if 2 <= r["iter"] < d))
    assert extra["sample_transient_s"] > 13 * 0.012  # the slow iterations 2..14 are in it
    timed = [r for r in rows if not r["warmup"]]
    assert len(timed) == 80 and extra["sample_stop"] == "cap"  # 0.01 % is never reached: the cap
    assert extra["sample_checks"] >= 1 and 0 <= extra["sample_check_s"] < rec.t_window1 - rec.t_window0
    assert extra["sample_halfwidth"] == pytest.approx(window_interval([r["iter_s"] for r in timed], 100_000).halfwidth)


def test_sampler_stops_once_the_interval_is_narrow_enough():
    rec, rows, extra = _sample(_Sleeper(slow=0, slow_s=0.0, fast_s=0.003), cap=5000, halfwidth=0.5)
    timed = [r for r in rows if not r["warmup"]]
    assert extra["sample_stop"] == "halfwidth" and len(timed) == 64  # the first check already within 50 %
    assert extra["sample_halfwidth"] <= 0.5 and extra["sample_target"] == 0.5


def test_sampler_warm_up_cap():
    rec, rows, extra = _sample(_Sleeper(slow=10**6, slow_s=0.001, fast_s=0.001), cap=70, max_warmup=3, warmup=2)
    assert rec.warmup == 3 and extra["sample_warmup"] == "cap" and extra["sample_transient_iterations"] == 1
    assert sum(not r["warmup"] for r in rows) >= 64
