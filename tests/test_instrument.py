"""The Recorder: phases, warm-up apart, the timed window (CPU clocks)."""

from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch")

from trainers.instrument import Recorder  # noqa: E402
from trainers.stats import percentile  # noqa: E402


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


# ---------------------------------------------------------------- no host-device synchronisation per iteration
class _FakeGPU:
    """CUDA stood in: events on a clock that moves one tick per record; the device
    completes work ``lag`` ticks behind the host. Counts every call that would make the
    host wait for the device, and every event made."""

    def __init__(self, lag: int):
        self.now, self.lag = 0, lag
        self.calls = {"synchronize": 0, "event_synchronize": 0, "to_host": 0, "events_made": 0, "query": 0,
                      "stream_lookups": 0}

    def done(self) -> int:
        return self.now - self.lag


def _fake_cuda(monkeypatch, gpu: _FakeGPU) -> None:
    class Event:
        def __init__(self, enable_timing=False, **_):
            gpu.calls["events_made"] += 1
            self.t = None

        def record(self, stream=None):
            gpu.now += 1
            self.t = gpu.now

        def query(self):
            gpu.calls["query"] += 1
            return self.t <= gpu.done()

        def elapsed_time(self, other):
            # CUDA raises on an event that has not completed: the Recorder must not ask
            assert self.t <= gpu.done() and other.t <= gpu.done(), "elapsed_time of an incomplete event"
            return (other.t - self.t) * 1.0

        def synchronize(self):
            gpu.calls["event_synchronize"] += 1

    def synchronize(device=None):
        gpu.calls["synchronize"] += 1
        gpu.lag = 0

    def current_stream(device=None):
        gpu.calls["stream_lookups"] += 1
        return "stream"

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "synchronize", synchronize)
    monkeypatch.setattr(torch.cuda, "current_stream", current_stream)
    for name in ("item", "tolist", "__float__", "cpu"):
        original = getattr(torch.Tensor, name)

        def counted(self, *a, _original=original, **k):
            gpu.calls["to_host"] += 1
            return _original(self, *a, **k)

        monkeypatch.setattr(torch.Tensor, name, counted)


@pytest.mark.parametrize("resolve_every", [None, 4])
def test_no_synchronising_call_inside_the_timed_window(monkeypatch, resolve_every):
    gpu = _FakeGPU(lag=30)
    _fake_cuda(monkeypatch, gpu)
    warmup, timed = 2, 40
    rec = Recorder(torch.device("cuda", 0), warmup=warmup, resolve_every=resolve_every,
                   expected_iterations=warmup + timed)
    losses = [torch.tensor(float(i)) for i in range(warmup + timed)]
    before = None
    for i in range(warmup + timed):
        rec.begin()
        if i == warmup:
            before = dict(gpu.calls)  # the window opened (one synchronize at its edge)
        for phase in ("data", "forward"):
            rec.mark(phase)
        span = rec.comm_span(1024)  # a DDP bucket: launch, then completion from the hook
        span[1] = rec.stamp()
        rec.mark("backward")
        rec.mark("step")
        rec.end(losses[i], images=8)
    inside = {k: gpu.calls[k] - before[k] for k in gpu.calls}
    rec.finish()
    assert inside["synchronize"] == inside["event_synchronize"] == inside["to_host"] == 0
    assert inside["events_made"] == 0  # all from the pool made before the run
    assert inside["stream_lookups"] <= timed * 2  # once per iteration for its marks, once per hook stamp
    if resolve_every:  # compactions polled completion (never waiting) and reused the events
        assert 0 < inside["query"] <= timed * 2 and rec._compacted > 0
    else:
        assert inside["query"] == 0
    rows = rec.rows()  # after the window: resolved, the losses copied to the host once
    assert [r["loss"] for r in rows] == [float(i) for i in range(warmup + timed)]
    assert all(r["iter_s"] > 0 for r in rows) and rec.summary(rows)["iterations"] == timed
