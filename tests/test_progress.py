"""Progress, rate and ETA from heartbeats (campaign/observe/progress.py), on made-up beats whose
answers are known, and how status renders them (campaign/observe/status.py)."""

from __future__ import annotations

import pytest

from campaign.observe.progress import Beat, PointETA, RankBeats, annotate, campaign_eta, loop_of, overheads
from campaign.observe.state import is_final
from campaign.observe.status import point_view, progress_line, render

NOW = 1_000_000.0
LOCAL = {"platform": {"name": "local", "executor": "local", "exclusive": True, "peak_tflops": {}},
         "trainer": {"name": "sleep", "params": {"a_s": 0.012, "b_s": 0.001, "c_s": 0.002}},
         "experiment": {"warmup_iterations": 5, "profile_iterations": 0}, "dataset": {"name": "synthetic"},
         "store": {"heartbeat_s": 2.0}}


def _beats(start: float, rate: float, total: int, upto: float, warmup: int = 5, every: float = 2.0) -> RankBeats:
    """A rank that started at ``start`` at ``rate`` it/s, beating every ``every`` s until ``upto``."""
    times = [start]
    while times[-1] + every <= upto:
        times.append(times[-1] + every)
    beats = [Beat(t, min(int((t - start) * rate), total), total, warmup) for t in times]
    timed = next((b for b in beats if b.iteration >= warmup), None)
    return RankBeats(beats[0], timed, beats[-1])


def _point(pid, state, gpus=1, **kw):
    p = dict(id=pid, idx=pid, platform="local", trainer="sleep", experiment="weak_scaling", gpus=gpus, nodes=1,
             repeat=0, batch_per_gpu=8, iterations=100, executor="local", config=LOCAL, state=state,
             attempt_id=pid, submitted_at=NOW - 100, started_at=None, ended_at=None, job_id=str(pid),
             overrides=[f"gpus={gpus}"])
    p.update(kw)
    return p


def test_rate_over_the_timed_iterations_and_the_slowest_rank():
    fast = _beats(NOW - 10, 10.0, 105, NOW)
    slow = _beats(NOW - 10, 8.0, 105, NOW)
    assert fast.rate() == pytest.approx(10.0, rel=0.02) and slow.rate() == pytest.approx(8.0, rel=0.02)
    loop = loop_of([fast, slow])
    assert loop.iteration == slow.last.iteration and loop.rate == slow.rate()
    assert loop.ends_at == pytest.approx(slow.last.at + (105 - slow.last.iteration) / slow.rate())
    only_start = RankBeats(Beat(NOW, 0, 105, 5), None, Beat(NOW, 0, 105, 5))
    assert only_start.rate() is None and loop_of([only_start]).ends_at is None
    assert loop_of([only_start], s_per_it=0.5).ends_at == NOW + 105 * 0.5


def test_start_up_is_measured_from_when_a_point_could_start():
    # serial points: the second could start when the first ended, 4 s before its first beat
    first = _point(1, "completed", started_at=NOW - 60, ended_at=NOW - 30)
    second = _point(2, "running", started_at=NOW - 25)
    loops = {1: loop_of([_beats(NOW - 58, 5.0, 105, NOW - 30.5)]), 2: loop_of([_beats(NOW - 26, 5.0, 105, NOW)])}
    over = overheads([first, second], loops)
    assert over.start_s == pytest.approx(((NOW - 58) - (NOW - 100) + 4.0) / 2)  # median of 42 and 4
    assert loops[1].done and loops[1].last_at == NOW - 32  # its last beat (every 2 s): the loop's end
    assert over.tail_s == pytest.approx(2.0)  # from there to the job's end


def test_eta_of_running_and_pending_points():
    # point 1 runs (1 GPU, 8.93 it/s by the law); point 2 (2 GPUs) pends: the declared law
    law1 = 1 / (8 * (0.012 + 0.002))
    s_per_it_2 = 2 * 8 * (0.012 / 2 + 0.001 + 0.002)
    running = _point(1, "running", started_at=NOW - 11)
    pending = _point(2, "pending", gpus=2)
    beats = {1: [_beats(NOW - 10, law1, 105, NOW)]}
    etas, over = annotate([running, pending], beats, now=NOW)
    r, q = etas[1], etas[2]
    assert r.rate == pytest.approx(law1, rel=0.03) and 0 < r.iteration < 105
    assert r.remaining_s == pytest.approx((105 - r.iteration) / r.rate - (NOW - beats[1][0].last.at), abs=0.01)
    assert q.source == "the trainer's declared time law" and q.total == 105
    assert q.remaining_s == pytest.approx(over.start_s + 105 * s_per_it_2)
    ceta = campaign_eta([running, pending], etas, now=NOW, is_final=is_final)
    assert ceta.ends_at == pytest.approx(NOW + r.remaining_s + q.remaining_s)  # one after another
    assert (ceta.done, ceta.running, ceta.pending, ceta.queue) == (0, 1, 1, False)
    assert ceta.fraction == pytest.approx(r.iteration / 105 / 2)


def test_a_pending_point_takes_the_rate_its_campaign_measured_for_the_same_work():
    running = _point(1, "running", started_at=NOW - 11)
    twin = _point(2, "pending")
    beats = {1: [_beats(NOW - 10, 3.0, 105, NOW)]}  # slower than the law says: the measurement wins
    etas, over = annotate([running, twin], beats, now=NOW)
    assert etas[2].source == "measured in this campaign"
    assert etas[2].remaining_s == pytest.approx(over.start_s + 105 / etas[1].rate)


def test_points_on_a_scheduler_run_at_once_and_the_queue_is_not_counted():
    slurm = {**LOCAL, "platform": {"name": "a100", "executor": "slurm", "exclusive": False, "peak_tflops": {}}}
    a = _point(1, "running", executor="slurm", config=slurm, started_at=NOW - 11)
    b = _point(2, "pending", executor="slurm", config=slurm)
    etas = {1: PointETA(50, 105, 5.0, remaining_s=11.0), 2: PointETA(total=105, remaining_s=30.0)}
    ceta = campaign_eta([a, b], etas, now=NOW, is_final=is_final)
    assert ceta.ends_at == NOW + 30.0 and ceta.queue
    etas[2] = PointETA(total=105)  # no estimate
    assert campaign_eta([a, b], etas, now=NOW, is_final=is_final).ends_at is None


def test_a_point_without_heartbeats_for_long_is_shown_stalled():
    p = _point(1, "running", started_at=NOW - 500)
    beats = {1: [_beats(NOW - 400, 2.0, 105, NOW - 350)]}
    etas, _ = annotate([p], beats, now=NOW)
    assert etas[1].stalled_s == pytest.approx(NOW - beats[1][0].last.at) and etas[1].remaining_s is None
    view = point_view(p, NOW, etas[1])
    assert "stalled? no heartbeat for" in render({"id": "c"}, [view], None, NOW)


def test_render_shows_varying_values_shares_the_rest_and_draws_the_bar():
    points = [_point(0, "completed"), _point(1, "running"), _point(2, "pending", gpus=2)]
    etas = {1: PointETA(40, 105, 8.9, 7.2), 2: PointETA(total=105, remaining_s=20.0)}
    views = [point_view(p, NOW, etas.get(p["id"]), {"trainer.optimizer": o})
             for p, o in zip(points, ["sgd", "adamw", "sgd"])]
    ceta = campaign_eta(points, etas, now=NOW, is_final=is_final)
    text = render({"id": "c1", "name": "demo"}, views, ceta, NOW)
    lines = text.splitlines()
    assert lines[0] == "campaign c1 (demo): trainer=sleep experiment=weak_scaling dataset=synthetic"  # no stored config: the name alone
    assert lines[1].split() == ["#", "platform", "gpus", "trainer.optimizer", "state", "progress", "it/s", "ETA",
                                "elapsed", "job", "reason"]
    assert lines[4].split()[:9] == ["1", "local", "1", "adamw", "running", "40/105", "8.9", "0:07", "-"]
    assert "~0:20" in lines[5]  # a pending point: how long it will take once it starts
    assert lines[-1].startswith("[") and "] 1/3 done, 1 running, 1 pending; ETA " in lines[-1]
    assert "(in 0:27)" in lines[-1]
    filled = lines[-1].split("]")[0].count("#")
    assert filled == round((1 + 40 / 105) / 3 * 24)
    assert progress_line(campaign_eta([_point(0, "completed")], {}, now=NOW, is_final=is_final), NOW) == \
        "[" + "#" * 24 + "] 1/1 done; every point has ended"


def test_a_rate_waits_for_enough_timed_iterations():
    start, window = Beat(NOW, 0, 500, 5), Beat(NOW + 0.7, 6, 500, 5)
    # 2 iterations in 0.3 s: a beat sees whole iterations, so that could be 1 or 3 (+-50 %)
    assert RankBeats(start, window, Beat(NOW + 1.0, 8, 500, 5)).rate() is None
    assert RankBeats(start, window, Beat(NOW + 3.0, 26, 500, 5)).rate() == pytest.approx(20 / 2.3)
    slow = Beat(NOW + 400, 8, 500, 5)  # slow iterations: two of them, minutes apart, will do
    assert RankBeats(start, window, slow).rate() == pytest.approx(2 / 399.3)
