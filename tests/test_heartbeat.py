"""Heartbeats (trainers/heartbeat.py): a rank's iteration count reaches the store from a
thread, at the start, every interval and at the end; the loop does nothing for it, and a
store that cannot take a heartbeat never fails the run."""

from __future__ import annotations

import threading
import time

import pytest

from campaign.store import open_store
from campaign_sql.ops import AttemptKey
from trainers import heartbeat
from trainers.writer import JobWriter


@pytest.fixture
def attempt(tmp_path):
    url = f"sqlite:///{tmp_path}/c.db"
    with open_store(url, create=True) as s:
        (pid,) = s.register({"id": "c1", "created_at": time.time()},
                            [{"idx": 0, "platform": "local", "trainer": "sleep", "experiment": "e", "dataset": "d",
                              "gpus": 1, "nodes": 1, "executor": "local", "state": "pending"}])
    writer = JobWriter(url)
    key = writer.start_attempt(pid, job_id="1", world_size=1, provenance={})
    yield url, writer, key
    writer.close()


def _rows(url):
    with open_store(url, readonly=True) as s, s.engine.connect() as conn:
        return conn.exec_driver_sql("select rank, seq, at, iteration, total, warmup from progress order by seq").all()


def test_rows_at_start_every_interval_and_end(attempt):
    url, writer, key = attempt
    count = {"i": 0}
    t0 = time.time()
    beat = heartbeat.start(writer, key, 0, total=50, warmup=5, counter=lambda: count["i"], interval_s=0.05)
    for _ in range(50):  # a loop that knows nothing of the heartbeat
        count["i"] += 1
        time.sleep(0.005)
    beat.stop()
    rows = _rows(url)
    assert rows[0][3] == 0 and rows[-1][3] == 50  # the loop's start and its end
    assert [r[1] for r in rows] == list(range(len(rows))) and len(rows) >= 3
    assert all(r[4] == 50 and r[5] == 5 and r[0] == 0 for r in rows)
    iterations = [r[3] for r in rows]
    assert iterations == sorted(iterations)
    assert t0 <= rows[0][2] <= rows[-1][2] <= time.time()
    assert not any(t.name.startswith("campaign-heartbeat") for t in threading.enumerate())


def test_a_beat_marks_the_timed_windows_start(attempt):
    """Long before the first interval, a beat tells where the warm-up ended: the rate over
    the timed iterations is known one interval into the window, not two."""
    url, writer, key = attempt
    count = {"i": 0}
    beat = heartbeat.start(writer, key, 0, total=40, warmup=5, counter=lambda: count["i"], interval_s=30)
    for _ in range(40):
        count["i"] += 1
        time.sleep(0.02)
    beat.stop()
    rows = _rows(url)
    assert [r[3] for r in rows][0] == 0 and rows[-1][3] == 40 and len(rows) == 3
    assert 5 < rows[1][3] < 40  # past the warm-up, before the end
    assert rows[1][2] - rows[0][2] < 1.0


def test_no_heartbeat_with_interval_zero_or_a_spooling_writer(attempt):
    url, writer, key = attempt
    assert isinstance(heartbeat.start(writer, key, 0, total=1, warmup=0, counter=lambda: 0, interval_s=0),
                      heartbeat.NoHeartbeat)
    assert isinstance(heartbeat.start(writer, AttemptKey(key.point_id, 7), 0, total=1, warmup=0, counter=lambda: 0,
                                      interval_s=1), heartbeat.NoHeartbeat)  # no such attempt in the store
    writer.spool_path = "somewhere"
    assert isinstance(heartbeat.start(writer, key, 0, total=1, warmup=0, counter=lambda: 0, interval_s=1),
                      heartbeat.NoHeartbeat)
    assert _rows(url) == []


def test_a_store_that_refuses_a_heartbeat_does_not_fail_the_run(attempt, tmp_path):
    url, writer, key = attempt
    beat = heartbeat.Heartbeat(writer.engine, 99999, 0, total=3, warmup=0, counter=lambda: 1, interval_s=10)
    assert beat.beat() is False  # no attempt 99999: the foreign key refuses the row, quietly
    broken = heartbeat.Heartbeat(object(), 1, 0, total=3, warmup=0, counter=lambda: 1, interval_s=10)
    broken.start()
    broken.stop()
    assert broken.written == 0


@pytest.mark.gpu
def test_a_heartbeat_makes_no_synchronisation_inside_the_timed_window(attempt):
    """The heartbeat thread beats (every millisecond here) while the timed window runs
    under torch's sync debug mode, which raises on any host-device wait."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device visible to torch")
    from trainers.instrument import Recorder

    url, writer, key = attempt
    device = torch.device("cuda", 0)
    a = torch.randn(256, 256, device=device)
    rec = Recorder(device, warmup=1, resolve_every=4, expected_iterations=200)
    beat = heartbeat.start(writer, key, 0, total=200, warmup=1, counter=lambda: rec.iterations_done,
                           interval_s=0.001)
    try:
        for i in range(200):
            rec.begin()
            if i == 1:
                torch.cuda.set_sync_debug_mode("error")
            b = a @ a
            rec.mark("forward")
            rec.end(b.sum(), images=2)
    finally:
        torch.cuda.set_sync_debug_mode("default")
        beat.stop()
    rec.finish()
    assert beat.written >= 2 and _rows(url)[-1][3] == 200
