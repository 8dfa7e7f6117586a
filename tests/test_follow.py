"""Following a campaign as a user does, on real local campaigns of the sleep trainer (whose
time per iteration is a known law): progress, rate and an ETA that lands where the
campaign really ends; --wait's summary and --timeout's exit status; the values a sweep
varies as columns of status and harvest; names shared by several campaigns."""

from __future__ import annotations

import csv
import io
import json
import time

import pytest

from campaign.common.errors import EXIT_TIMEOUT
from campaign.store import open_store
from conftest import campaign_id_from

SLEEP = ["platform=local", "trainer=sleep", "experiment.warmup_iterations=5"]
LAW = {1: 8 * (0.012 + 0.002), 2: 2 * 8 * (0.012 / 2 + 0.001 + 0.002)}  # seconds per iteration, defaults


@pytest.mark.slow
def test_a_user_watching_a_two_point_campaign_sees_progress_and_an_eta_that_lands(ws):
    """From the first moment a point reports its rate to the end, every ETA status shows
    lands within 20 % of the campaign's run time of its real end (before the second point
    starts, give or take how far its start-up differed from the first's: the ETA's guess).
    The loops take 38 s; a job's start-up on this shared 2-core machine takes 2 to 40 s
    (torch's import under load) and is the part an ETA can only take from the points before."""
    # 1 GPU: 205 iterations x 0.112 s = 23 s; 2 GPUs: 105 x 0.144 s = 15 s; one after the other
    launched = time.time()
    res = ws.launch("-m", *SLEEP, "gpus=1,2", "experiment.base_iterations=200", "store.heartbeat_s=1", "name=eta")
    assert res.returncode == 0, res.stderr
    cid = campaign_id_from(res.stdout)
    early = ws.campaign("status", cid, "--wait", "--timeout", "1", "--interval", "0.2")
    assert early.returncode == EXIT_TIMEOUT, early.stderr
    summary = early.stderr.strip().splitlines()[-1]
    assert summary.startswith("timed out after 0:0") and "not finished" in summary and "ETA" in summary

    samples = []  # (when, the campaign's predicted end, the running point's view)
    deadline = time.monotonic() + 400
    while time.monotonic() < deadline:
        now = time.time()
        doc = json.loads(ws.campaign("status", cid, "--json").stdout)
        running = [p for p in doc["points"] if p["state"] == "running" and p["rate_it_s"]]
        if running:
            samples.append((now, doc["progress"]["ends_at"], running[0]))
        if all(p["state"] == "completed" for p in doc["points"]):
            break
        time.sleep(1.0)
    (end,) = ws.query("select max(ended_at) from point")[0]
    took = end - launched
    # one every 1-2 s on a quiet machine (a status, then a second); a whole run keeps both
    # cores busy and a status then takes up to 10 s: 5 samples came in 75 s
    assert len(samples) >= 4, samples
    assert samples[0][0] - launched < took / 2  # an ETA was there for most of the campaign
    # Until the second point starts, its start-up is the first one's, as far as an ETA can
    # know: by how much the real one differed (a loaded machine's torch import) it may miss too.
    (_, first_start, first_end), (_, second_start, _) = ws.query(
        "select idx, started_at, ended_at from point where campaign_id = ? order by idx", cid)
    unforeseen = abs((second_start - first_end) - (first_start - launched))
    for when, predicted, point in samples:
        assert 0 < point["iteration"] <= point["iterations"] == {1: 205, 2: 105}[point["gpus"]]
        # the rate is the law's (sleeps run to deadlines: the loop keeps the law under load)
        assert point["rate_it_s"] == pytest.approx(1 / LAW[point["gpus"]], rel=0.1)
        if when < end:
            bound = 0.2 * took + (unforeseen if when < second_start else 0.0)
            assert predicted is not None and abs(predicted - end) <= bound, (when - launched, predicted - end, took,
                                                                               unforeseen)

    done = ws.campaign("status", cid, "--wait", "--interval", "0.2")
    assert done.returncode == 0
    assert done.stderr.strip().splitlines()[-1].startswith("waited 0:0") and "every point completed" in done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[" + "#" * 24 + "] 2/2 done; every point has ended"


@pytest.mark.slow
def test_a_swept_value_is_a_column_of_status_and_harvest(ws):
    res = ws.launch("-m", *SLEEP, "gpus=1", "experiment.base_iterations=6", "trainer.params.b_s=0.001,0.003",
                    "trainer.params.c_s=0.001,0.002", "experiment.warmup_iterations=1", "trainer.params.a_s=0.001")
    assert res.returncode == 0, res.stderr
    assert ws.campaign("status", "--wait", "--interval", "2").returncode == 0
    status = ws.campaign("status").stdout.splitlines()
    header = status[1].split()
    assert header[:5] == ["#", "platform", "gpus", "trainer.params.b_s", "trainer.params.c_s"]
    rows = [line.split() for line in status[3:7]]
    assert [r[3:5] for r in rows] == [["0.001", "0.001"], ["0.001", "0.002"], ["0.003", "0.001"], ["0.003", "0.002"]]
    doc = json.loads(ws.campaign("status", "--json").stdout)
    assert doc["points"][2]["values"] == {"trainer.params.b_s": "0.003", "trainer.params.c_s": "0.001"}

    table = ws.campaign("harvest").stdout.splitlines()
    head = table[3].split()  # after the campaign, the title and a blank line
    assert head[:5] == ["platform", "trainer", "experiment", "trainer.params.b_s", "trainer.params.c_s"]
    assert "variant" not in head
    exported = list(csv.DictReader(io.StringIO(ws.campaign("harvest", "--to", "csv").stdout)))
    assert sorted((r["trainer.params.b_s"], r["trainer.params.c_s"]) for r in exported) == [
        ("0.001", "0.001"), ("0.001", "0.002"), ("0.003", "0.001"), ("0.003", "0.002")]
    parsed = json.loads(ws.campaign("harvest", "--to", "json").stdout)
    assert sorted(r["trainer.params.c_s"] for r in parsed) == [0.001, 0.001, 0.002, 0.002]  # numbers, not text


def _register(url: str, cid: str, name: str, created: float) -> None:
    with open_store(url, create=True) as s:
        s.register({"id": cid, "name": name, "created_at": created},
                   [{"idx": 0, "platform": "local", "trainer": "sleep", "experiment": "weak_scaling",
                     "dataset": "synthetic", "gpus": 1, "nodes": 1, "executor": "local", "state": "completed"}])


@pytest.mark.slow
def test_a_name_several_campaigns_share_takes_the_latest_and_says_so(ws):
    _register(ws.store_url, "20260101-000000-aaaa", "study", 1_000.0)
    _register(ws.store_url, "20260102-000000-bbbb", "study", 2_000.0)
    _register(ws.store_url, "20260103-000000-cccc", "other", 3_000.0)
    res = ws.campaign("status", "study")
    assert res.stderr.splitlines()[0] == ("note: 'study' names 2 campaigns; showing the latest, "
                                          "20260102-000000-bbbb (an id picks another: 20260101-000000-aaaa)")
    res = ws.campaign("harvest", "study")  # harvest, figures, report: every campaign of the name, as one
    assert res.stderr.splitlines()[0] == ("note: 'study' names 2 campaigns; reading all of them as one: "
                                          "20260101-000000-aaaa, 20260102-000000-bbbb (an id picks one)")
    assert ws.campaign("status", "study").stdout.startswith("campaign 20260102-000000-bbbb (study)")
    older = ws.campaign("status", "20260101-000000-aaaa")  # an id addresses any of them, silently
    assert older.stdout.startswith("campaign 20260101-000000-aaaa (study)") and older.stderr == ""
    assert ws.campaign("status", "other").stderr == ""  # a name one campaign has: no note
    ambiguous = ws.campaign("status", "2026010")
    assert ambiguous.returncode == 2 and "matches 3 campaigns" in ambiguous.stderr
