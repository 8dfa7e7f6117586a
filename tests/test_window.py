"""Known answers of the sampled window's statistics (campaign_window/) and of
the job's sampler (trainers/sampling.py) on a real Recorder."""

from __future__ import annotations

import math
import random
import time

import pytest

from campaign_window import (batches, mser_truncation, t_quantile, warmed_up, window_interval)


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


def _rule(warmup=2, cap=300, halfwidth=0.05, max_warmup=200, full=100_000):
    from trainers.sampling import SampleRule

    return SampleRule(planned_warmup=warmup, max_warmup=max_warmup, max_timed=cap, halfwidth=halfwidth,
                      full_iterations=full)


def _replay(xs, rule):
    """The rule fed ``xs`` one iteration at a time: (window start, warm-up reason, timed
    iterations, stop reason)."""
    from trainers.sampling import WindowRule

    r = WindowRule(rule)
    for done in range(1, len(xs) + 1):
        if r.after(done, lambda: xs[:done]):
            return r.window_start, r.warmup_reason, done - r.window_start, r.stop_reason
    raise AssertionError("the rule never stopped")


def test_rule_waits_for_the_transient_to_end_two_checks_in_a_row():
    # 15 slow iterations, then a steady alternation (no spread in batches of 2)
    xs = [12.0] * 15 + [2.0, 2.2] * 400
    # checks at 20 (MSER takes the transient for a level: settled), 25 (truncation 15 > 12.5:
    # not settled), 32 (15 <= 16: settled), 40 (settled twice in a row): the window opens at 40
    start, why, k, stop = _replay(xs, _rule(cap=100, halfwidth=0.0))
    assert (start, why, k, stop) == (40, "settled", 100, "cap")
    # a target the first window check (64 iterations) already meets: it stops there
    assert _replay(xs, _rule(halfwidth=0.5))[2:] == (64, "halfwidth")
    # the warm-up cap: the window opens after max_warmup iterations whatever the times say
    assert _replay([1.0] * 10**3, _rule(max_warmup=3, cap=70))[:2] == (3, "cap")


def test_rule_samples_on_while_the_interval_is_too_wide():
    rnd = random.Random(3)
    xs = [1.0] * 30 + [1.0 + 0.05 * rnd.gauss(0, 1) for _ in range(5000)]
    start, _, k, stop = _replay(xs, _rule(cap=5000, halfwidth=0.01))
    assert stop == "halfwidth" and 64 < k < 1000
    assert window_interval(xs[start:start + k], 100_000).halfwidth <= 0.01  # what it stopped on
    # the check before it (k / 1.25) was still wider: it did not stop late
    assert window_interval(xs[start:start + math.floor(k / 1.25)], 100_000).halfwidth > 0.01


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


def test_sampler_runs_the_rule_on_its_own_iterations_and_stores_what_harvest_needs():
    """A real Recorder: the window the sampler chose is the one the rule chooses when
    replayed on the iteration times the Recorder stored (whatever this machine's load
    made them), and the stored figures are those of its rows."""
    torch = pytest.importorskip("torch")
    from trainers.instrument import Recorder
    from trainers.sampling import WindowSampler

    rule = _rule(cap=120, halfwidth=0.02)
    rec = Recorder(torch.device("cpu"), warmup=rule.planned_warmup)
    sampler = WindowSampler(rule, rec, lambda flag: flag)
    sampler.run(_Sleeper(slow=15, slow_s=0.012, fast_s=0.003))
    rows = rec.rows()
    extra = sampler.extra(rows)
    start, why, k, stop = _replay([r["iter_s"] for r in rows] + [1.0] * 10**4, rule)
    timed = [r for r in rows if not r["warmup"]]
    assert (rec.warmup, len(timed)) == (start, k) and (extra["sample_warmup"], extra["sample_stop"]) == (why, stop)
    assert start >= 20 and rows[start - 1]["warmup"] and not rows[start]["warmup"]
    assert extra["sample_planned_warmup"] == 2 and extra["sample_transient_iterations"] == start - 2
    assert extra["sample_transient_s"] == pytest.approx(sum(r["iter_s"] for r in rows if 2 <= r["iter"] < start))
    assert extra["sample_transient_s"] > 13 * 0.012  # the slow iterations 2..14 are in it
    assert extra["sample_halfwidth"] == pytest.approx(window_interval([r["iter_s"] for r in timed], 100_000).halfwidth)
    assert extra["sample_checks"] >= 1 and 0 <= extra["sample_check_s"] < rec.t_window1 - rec.t_window0


def test_the_window_statistics_are_a_neutral_package():
    """Both sides import campaign_window (the job to decide, harvest to report): it imports
    neither side, nor torch, numpy or polars."""
    import ast
    from pathlib import Path

    import campaign_window

    tree = ast.parse(Path(campaign_window.__file__).read_text())
    tops = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    tops |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert tops <= {"__future__", "math", "dataclasses", "statistics", "typing"}, tops
