"""Repeats and utilisation on a real store: one sweep point run K=5 times (repeats=5)
with a profiler window, harvested through the CLI and checked against the store's rows."""

from __future__ import annotations

import csv
import io
import statistics

import pytest

from conftest import Workspace, campaign_id_from

K = 5


@pytest.fixture(scope="module")
def repeated(tmp_path_factory):
    ws = Workspace(tmp_path_factory.mktemp("repeats"))
    res = ws.launch("-m", "trainer=sleep", "gpus=1", f"repeats={K}", "experiment.base_iterations=4",
                    "experiment.images_per_gpu=2", "experiment.warmup_iterations=1", "experiment.profile_iterations=2")
    assert res.returncode == 0, res.stderr
    cid = campaign_id_from(res.stdout)
    wait = ws.campaign("status", cid, "--wait", "--interval", "0.5", "--timeout", "600", timeout=660)
    assert wait.returncode == 0, wait.stdout + wait.stderr
    times = [w for (w,) in ws.query(
        "select max(r.wall_s) from rank_timing r join attempt a on a.id = r.attempt_id "
        "join point p on p.id = a.point_id group by p.id")]
    assert len(times) == K
    return ws, cid, times


def _csv(ws, *args) -> list[dict]:
    res = ws.campaign("harvest", *args, "--to", "csv")
    assert res.returncode == 0, res.stderr
    return list(csv.DictReader(io.StringIO(res.stdout)))


@pytest.mark.slow
def test_repeat_statistics_from_the_store(repeated):
    ws, cid, times = repeated
    (row,) = _csv(ws, cid)
    xs = sorted(times)
    assert int(row["repeats"]) == K
    assert float(row["time_s"]) == pytest.approx(statistics.median(xs))
    assert (float(row["time_min_s"]), float(row["time_max_s"])) == pytest.approx((xs[0], xs[-1]))
    assert float(row["time_olympic_s"]) == pytest.approx(sum(xs[1:-1]) / (K - 2))  # best and worst dropped
    q1, _, q3 = statistics.quantiles(xs, n=4, method="inclusive")
    assert float(row["time_iqr_s"]) == pytest.approx(q3 - q1)
    assert float(row["time_rel_range"]) == pytest.approx((xs[-1] - xs[0]) / statistics.median(xs))
    assert float(row["speedup"]) == 1.0


@pytest.mark.slow
def test_throughput_repeats_have_their_spread(repeated):
    ws, cid, _ = repeated
    (row,) = _csv(ws, cid, "--table", "throughput")
    assert int(row["repeats"]) == K and row["iter_olympic_s"] != "" and row["images_per_s_olympic"] != ""
    assert float(row["iter_min_s"]) <= float(row["iter_s"]) <= float(row["iter_max_s"])


@pytest.mark.slow
def test_utilisation_shows_what_was_profiled_and_only_that(repeated):
    ws, cid, _ = repeated
    (row,) = _csv(ws, cid, "--table", "utilisation")
    assert row["profiled_iterations"] == "2"
    assert row["gpu_util"] == "" and row["note"] == "no device time (CPU ranks)"  # CPU ranks: absent, not 0
    cpu = [u for (u,) in ws.query("select cpu_util from profile")]
    assert len(cpu) == K and float(row["cpu_util"]) == pytest.approx(statistics.median(cpu))
    phases = {(r["source"], r["phase"]): r for r in _csv(ws, cid, "--table", "breakdown")}
    # CPU util is the host's busy time over the window (<= 1); busy cores the operators'
    # thread-seconds over it, which the breakdown's profiler cpu share is
    assert 0 <= float(row["cpu_util"]) <= 1  # the sleep trainer runs few operators
    assert float(phases[("profiler", "cpu")]["share"]) == pytest.approx(float(row["cpu_busy_cores"]))
    assert phases[("profiler", "device")]["seconds"] == ""
