"""Issue #41, finding 6: a forged campaign steered others' budgets. Anyone who can write a
shared store added a campaign dated 2100 with a rate of 1e-6 s/it, and a launch refused at
its declared cost passed ``max_gpu_hours`` on that rate. Each case is a store crafted as
such a member would, read by the real launch's dry run: an estimate takes your own
campaigns first, never one dated ahead, and never a rate more than 10x faster than the
trainer declares (campaign/observe/measured.py); it names the campaign, and whose."""

from __future__ import annotations

import getpass
import json
import time

from campaign.store import open_store
from test_trust_values import _completed, _row

LAUNCH = ("-m", "gpus=1", "trainer=sleep", "experiment.base_iterations=1000")
LAW = "the trainer's declared time law"
REFUSED = "error: this campaign needs an estimated 0.034 GPU-hours (1 point(s), wall time 2:03), over " \
          "max_gpu_hours=0.01; nothing was stored. --dry-run shows the estimate per point; sweep fewer points or " \
          "iterations, or raise max_gpu_hours"
OWN, OTHER = "20261120-090000-0000", "21000101-000000-ffff"


def _dry_run(ws, *extra: str):
    res = ws.launch(*LAUNCH, "--dry-run", "--json", *extra)
    assert res.returncode == 0, res.stderr
    (doc,) = [json.loads(line) for line in res.stdout.splitlines()]
    return doc


def _forge(ws, doc: dict, cid: str, *, user: str, created_at: float, s_per_it: float) -> None:
    """A campaign of the dry run's very work, one completed point at ``s_per_it``."""
    row = _row(0, state="completed", trainer="sleep", config=doc["config"], gpus=1, nodes=1,
               batch_per_gpu=doc["config"]["experiment"]["images_per_gpu"])
    with open_store(ws.store_url, create=True) as s:
        (pid,) = s.register({"id": cid, "created_at": created_at, "name": "fast", "results_dir": str(ws.results),
                             "user": user}, [row])
        with s.engine.begin() as conn:
            _completed(conn, pid, s_per_it * 8)  # 8 iterations


def _budget(ws):
    return ws.launch(*LAUNCH, "max_gpu_hours=0.01", "--dry-run")


def test_a_campaign_dated_2100_with_a_tiny_rate_does_not_pass_a_budget(ws):
    doc = _dry_run(ws)
    assert doc["estimate"]["source"] == LAW
    assert _budget(ws).stderr.splitlines() == [REFUSED]  # refused on the declaration
    _forge(ws, doc, OTHER, user="mallory", created_at=4102444800.0, s_per_it=1e-6)
    before = ws.db.read_bytes()
    over = _budget(ws)
    assert over.returncode == 2 and over.stderr.splitlines() == [REFUSED]
    assert _dry_run(ws)["estimate"]["source"] == LAW  # dated ahead: never a candidate
    assert ws.db.read_bytes() == before  # the dry runs read the store, never write it


def test_a_rate_far_faster_than_the_declaration_is_left_out_and_said(ws):
    doc = _dry_run(ws)
    _forge(ws, doc, OTHER, user="mallory", created_at=time.time() - 60, s_per_it=1e-6)
    over = _budget(ws)
    assert over.returncode == 2 and over.stderr.splitlines() == [REFUSED]
    assert _dry_run(ws)["estimate"]["source"] == (
        f"{LAW}; campaign {OTHER} (mallory's)'s measured 1e-06 s/it left out: more than 10x faster than the "
        "declared 0.112 s/it")


def test_your_own_campaign_comes_first_and_anothers_is_named_as_theirs(ws):
    doc = _dry_run(ws)
    _forge(ws, doc, OTHER, user="mallory", created_at=time.time() - 60, s_per_it=0.2)
    est = _dry_run(ws)["estimate"]  # believable (slower than declared): used, and said to be mallory's
    assert est["source"] == f"measured in campaign {OTHER} (mallory's)" and est["s_per_it"] == 0.2
    _forge(ws, doc, OWN, user=getpass.getuser(), created_at=time.time() - 3600, s_per_it=0.15)
    est = _dry_run(ws)["estimate"]  # older, but yours
    assert est["source"] == f"measured in campaign {OWN}" and est["s_per_it"] == 0.15
