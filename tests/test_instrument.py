"""The Recorder: phases, warm-up apart, the timed window (CPU clocks)."""

from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch")

from trainers.instrument import Recorder, percentile  # noqa: E402


def test_phases_sum_to_the_iteration_and_warmup_is_apart():
    rec = Recorder(torch.device("cpu"), warmup=2)
    for i in range(5):
        rec.begin()
        time.sleep(0.002)
        rec.mark("data")
        time.sleep(0.004)
        rec.mark("forward")
        time.sleep(0.001)
        rec.mark("backward")
        loss = torch.tensor(float(5 - i))
        rec.mark("step")
        rec.end(loss, images=8)
    rec.finish()
    rows = rec.rows()
    assert [r["warmup"] for r in rows] == [True, True, False, False, False]
    for r in rows:
        parts = r["data_s"] + r["forward_s"] + r["backward_s"] + r["step_s"]
        assert parts == pytest.approx(r["iter_s"], rel=0.05)  # only the end() call itself is outside
        assert r["data_s"] >= 0.002 and r["forward_s"] >= 0.004
        assert r["comm_s"] is None  # never marked: absent, not zero
    s = rec.summary(rows)
    assert s["iterations"] == 3 and s["warmup_iterations"] == 2 and s["images"] == 24
    assert s["wall_s"] >= sum(r["iter_s"] for r in rows[2:])
    assert s["final_loss"] == 1.0 and s["comm_s"] is None


def test_percentile():
    assert percentile([1.0], 95) == 1.0
    assert percentile([0.0, 10.0], 50) == 5.0
    assert percentile(list(map(float, range(101))), 95) == 95.0


def test_threads_per_rank_never_oversubscribe_the_node():
    from trainers.job import threads_per_rank

    assert threads_per_rank(16, ranks_on_node=4, cores=2) == 1  # emulated node: 128 CPUs advertised, 2 real
    assert threads_per_rank(16, ranks_on_node=1, cores=2) == 2
    assert threads_per_rank(4, ranks_on_node=2, cores=64) == 4  # what the scheduler granted
    assert threads_per_rank(None, ranks_on_node=2, cores=8) == 4
