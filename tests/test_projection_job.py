"""A sampled run through the real path (launch -> 2 gloo ranks -> store -> harvest): the
ranks agree on one window, the job stores what harvest projects with, and harvest's
figures are the documented formulas of those stored numbers (campaign/harvest/projection.py)."""

from __future__ import annotations

import json

import pytest

from conftest import campaign_id_from

TINY_MODEL = ["trainer.params.width=4", "trainer.params.depth=2", "dataset.image_size=8"]


@pytest.mark.slow
def test_sampled_run_on_two_ranks_projects_from_its_stored_figures(ws):
    launched = ws.launch("-m", "gpus=2", "experiment=projection", "experiment.iterations=4000",
                         "experiment.warmup_iterations=3", "experiment.sample_iterations=150",
                         "experiment.sample_halfwidth=0.02", *TINY_MODEL)
    assert launched.returncode == 0, launched.stderr
    cid = campaign_id_from(launched.stdout)
    done = ws.campaign("status", cid, "--wait", "--interval", "0.5", "--timeout", "300", timeout=330)
    assert done.returncode == 0, done.stdout + done.stderr
    ranks = ws.query("SELECT rank, warmup_iterations, iterations, wall_s, warmup_s, extra FROM rank_timing ORDER BY rank")
    assert len(ranks) == 2
    extras = [json.loads(r[5]) for r in ranks]
    # one window for both ranks: the same warm-up and the same timed iterations
    assert ranks[0][1] == ranks[1][1] >= 20 and ranks[0][2] == ranks[1][2]
    assert 64 <= ranks[0][2] <= 150
    for e in extras:
        assert e["sample_planned_warmup"] == 3 and e["sample_transient_iterations"] == ranks[0][1] - 3
        assert e["sample_warmup"] in ("settled", "cap") and e["sample_stop"] in ("halfwidth", "cap")
        assert e["sample_stop"] == "cap" or e["sample_halfwidth"] <= 0.02 or ranks[0][2] == 150
        assert e["startup_s"] > 0.5  # the interpreter, torch, the process group, the model
        assert e["gc_frozen_objects"] > 10_000  # torch's and the model's objects, frozen before the first iteration
    rows = ws.query("SELECT rank, COUNT(*) FROM iteration GROUP BY rank")
    assert rows[0][1] == rows[1][1] == ranks[0][1] + ranks[0][2]
    res = ws.campaign("harvest", cid, "--to", "json")
    assert res.returncode == 0, res.stderr
    (row,) = json.loads(res.stdout)
    window = max(r[3] for r in ranks)
    k, n = ranks[0][2], 4000
    transient = max(e["sample_transient_s"] for e in extras)
    checks = max(e["sample_check_s"] for e in extras)
    expected = transient + (window - checks) / k * (n - extras[0]["sample_transient_iterations"])
    assert row["projected"] is True and row["time_s"] == pytest.approx(expected, rel=1e-9)
    assert row["time_lo_s"] < row["time_s"] < row["time_hi_s"]
    startup = max(e["startup_s"] for e in extras)
    warmup = max(r[4] for r in ranks)
    assert row["gpu_hours"] == pytest.approx((startup + warmup - transient + expected) * 2 / 3600, rel=1e-9)
