"""Values read from a shared store or results folder are data, checked at the boundary
(issue #30), each case from a store or folder crafted as someone who can write them would:

- a stored job id never reaches a scheduler as an option (``scancel --user=...``);
- a campaign dated in the future is nobody's default "latest" campaign;
- a stored campaign id is joined into a path only as campaign writes it;
- ingest changes only the campaign, point, attempt and rank a spool file's folder and
  name stand for;
- a read command imports no module a stored config names.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from sqlalchemy import insert, select

from campaign.common.errors import StoreError
from campaign.common.proc import Completed
from campaign.store import open_store
from campaign_sql.schema import attempt, rank_timing
from conftest import point_config

CID_A, CID_B = "20260101-000000-aaaa", "20260102-000000-bbbb"
CRAFTED = ["--user=root", "-u", "1;2", "123 456", "5_0,--user=root", "../x", "\x1b[2J7", "5_[1-3]", "0"]


def _row(idx, **kw):
    row = dict(idx=idx, platform="local", trainer="synthetic", experiment="smoke", dataset="synthetic", gpus=1,
               nodes=1, repeat=0, executor="local", state="running", iterations=8, batch_per_gpu=4, job_id=None,
               job_folder=None, reason=None, log_path=None, config=point_config("gpus=1"), submitted_at=time.time())
    row.update(kw)
    return row


def _campaign(store, cid, results: Path, rows, **kw) -> list[int]:
    return store.register(dict({"id": cid, "created_at": time.time(), "name": "study", "results_dir": str(results)},
                               **kw), rows)


# ---------------------------------------------------------------- job ids (pure: a recording scheduler)


def _recording_slurm(monkeypatch):
    from campaign.backends import slurm

    calls = []

    def fake_run(argv, **kw):
        calls.append(list(argv))
        return Completed(list(argv), 0, "", "")

    monkeypatch.setattr(slurm, "run", fake_run)
    return slurm.SlurmBackend(), calls


@pytest.mark.parametrize("job_id", CRAFTED)
def test_a_crafted_slurm_job_id_reaches_no_scheduler_command(monkeypatch, job_id):
    backend, calls = _recording_slurm(monkeypatch)
    seen = backend.observe([{"id": 1, "job_id": job_id, "state": "running", "submitted_at": 1.0}])
    assert seen[1].state == "lost"
    assert seen[1].reason == (f"the store's job id {job_id!r} is not a SLURM job id as campaign writes it "
                              "(123 or 123_4); not sent to SLURM")
    assert backend.cancel([{"id": 1, "job_id": job_id}]) == []
    assert calls == []


def test_good_ids_still_go_and_scancel_reads_none_as_an_option(monkeypatch):
    backend, calls = _recording_slurm(monkeypatch)
    done = backend.cancel([{"id": 1, "job_id": "--user=root"}, {"id": 2, "job_id": "5_1"}, {"id": 3, "job_id": "7"}])
    assert done == [2, 3] and calls == [["scancel", "--", "5_1", "7"]]
    backend.observe([{"id": 1, "job_id": "-u", "state": "running"}, {"id": 2, "job_id": "5_1", "state": "running"}])
    assert calls[1][:3] == ["sacct", "-j", "5"]


def test_a_long_crafted_id_is_shown_cut_short():
    from campaign.backends.slurm import bad_job_id

    reason = bad_job_id("--user=" + "x" * 5000)
    assert len(reason) < 200 and "'--user=xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'..." in reason


@pytest.mark.parametrize("job_id", ["-1", "1 2", "--user=root", "0", "../1"])
def test_a_crafted_local_job_id_is_neither_looked_up_nor_signalled(monkeypatch, job_id):
    from campaign.backends import local

    killed = []
    monkeypatch.setattr(local.os, "kill", lambda pid, sig: killed.append(pid))
    backend = local.LocalBackend()
    seen = backend.observe([{"id": 1, "job_id": job_id, "state": "running", "job_folder": "/tmp"}])
    assert seen[1].state == "lost" and "is not a local job id as campaign writes it (a process id)" in seen[1].reason
    assert backend.cancel([{"id": 1, "job_id": job_id}]) == [] and killed == []


def test_status_and_cancel_show_a_crafted_local_job_id_as_lost_escaped(ws):
    with open_store(ws.store_url, create=True) as s:
        _campaign(s, CID_A, ws.results, [_row(0, job_id="-1\x1b[2J")])
    res = ws.campaign("status", "--json")
    assert res.returncode == 0, res.stderr
    view = json.loads(res.stdout)["points"][0]
    assert view["state"] == "lost" and "'-1\\x1b[2J' is not a local job id" in view["reason"]
    table = ws.campaign("status")
    assert "\x1b" not in table.stdout and "'-1\\x1b[2J' is not a local job id" in table.stdout
    res = ws.campaign("cancel")  # a lost point's job (and one nobody signed): never near a backend (issue #48)
    assert res.returncode == 0, res.stderr
    assert (res.stdout, res.stderr) == (f"campaign {CID_A}: cancelled 0 point(s)\n", "")


def test_a_stored_executor_no_backend_has_is_lost_not_a_traceback(ws):
    with open_store(ws.store_url, create=True) as s:
        _campaign(s, CID_A, ws.results, [_row(0, job_id="12", executor="campaign.evil")])
    res = ws.campaign("status", "--json")
    assert res.returncode == 0, res.stderr
    view = json.loads(res.stdout)["points"][0]
    assert view["state"] == "lost"
    assert view["reason"] == "the store's executor 'campaign.evil' is none of campaign's (local, slurm); not asked"
    assert ws.campaign("cancel").returncode == 0


# ---------------------------------------------------------------- the real local SLURM cluster


@pytest.fixture
def cluster():
    from test_slurm import _cluster_up

    why = _cluster_up()
    if why:
        pytest.skip(why)


def _queued(job: str) -> str:
    out = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True, timeout=60)
    return out.stdout.strip()


@pytest.mark.slurm
def test_a_crafted_job_id_cancels_no_other_job_on_a_real_cluster(ws, cluster):
    """A point whose stored job id is ``--name=<bystander>`` (or ``--user=...``): before,
    ``campaign cancel`` ran ``scancel --name=...`` and ended the bystander job."""
    name = f"bystander-{uuid.uuid4().hex[:8]}"
    job = subprocess.run(["sbatch", "--parsable", f"--job-name={name}", "-o", "/dev/null", "--wrap", "sleep 120"],
                         capture_output=True, text=True, timeout=60, check=True).stdout.strip().split(";")[0]
    try:
        from conftest import until

        until(lambda: _queued(job) in ("PENDING", "RUNNING"), 60, "the bystander job in the queue")
        with open_store(ws.store_url, create=True) as s:
            _campaign(s, CID_A, ws.results, [_row(0, executor="slurm", platform="v100", job_id=f"--name={name}"),
                                             _row(1, executor="slurm", platform="v100", job_id=f"-n{name}")])
        status = ws.campaign("status", "--json")
        assert status.returncode == 0, status.stderr
        assert [p["state"] for p in json.loads(status.stdout)["points"]] == ["lost", "lost"]
        res = ws.campaign("cancel")
        assert res.returncode == 0, res.stdout + res.stderr
        # lost points (their ids are no job's): never near scancel, nothing said for them
        assert (res.stdout, res.stderr) == (f"campaign {CID_A}: cancelled 0 point(s)\n", "")
        time.sleep(2)
        assert _queued(job) in ("PENDING", "RUNNING"), "the bystander job was cancelled"
    finally:
        subprocess.run(["scancel", "--", job], timeout=60)


@pytest.mark.slurm
def test_scancel_takes_double_dash_before_ids_on_the_real_cluster(cluster):
    job = subprocess.run(["sbatch", "--parsable", "-o", "/dev/null", "--wrap", "sleep 120"], capture_output=True,
                         text=True, timeout=60, check=True).stdout.strip().split(";")[0]
    from campaign.backends.slurm import SlurmBackend
    from conftest import until

    assert SlurmBackend().cancel([{"id": 1, "job_id": job}]) == [1]
    until(lambda: _queued(job) in ("", "COMPLETING", "CANCELLED"), 60, "the job cancelled")


# ---------------------------------------------------------------- "latest" and stored campaign ids


def test_a_campaign_dated_in_the_future_is_not_the_latest(ws):
    with open_store(ws.store_url, create=True) as s:
        _campaign(s, CID_A, ws.results, [_row(0, state="completed")], name="study")
        _campaign(s, CID_B, ws.results, [_row(0, state="completed")], name="study", created_at=time.time() + 86400)
        assert s.resolve_campaign(None)["id"] == CID_A
        found, note = s.find_campaign("study")
        assert found["id"] == CID_A
        assert note == f"'study' names 2 campaigns; showing the latest, {CID_A} (an id picks another: {CID_B})"
        assert s.resolve_campaign(CID_B)["id"] == CID_B  # by its id, still
    res = ws.campaign("status")
    assert res.returncode == 0 and res.stdout.startswith(f"campaign {CID_A} (study)"), res.stdout + res.stderr


def test_a_store_of_future_campaigns_only_has_no_latest(ws):
    with open_store(ws.store_url, create=True) as s:
        _campaign(s, CID_B, ws.results, [_row(0, state="completed")], name="ahead", created_at=time.time() + 86400)
        assert s.find_campaign("ahead")[1] == ("campaign 20260102-000000-bbbb is dated in the future (a clock off, "
                                               "or a store others altered)")
    res = ws.campaign("status")
    assert res.returncode == 2
    assert res.stderr == (f"error: no campaign in {ws.db} is dated up to now; {CID_B} is dated in the future (a clock "
                          "off, or a store others altered): name one by its id\n")


@pytest.mark.parametrize("cid", ["../../x", "a/b", "..", "20260101-000000-aaaa/../../x", "/etc"])
def test_a_stored_campaign_id_that_is_no_id_is_never_joined_into_a_path(ws, tmp_path, cid):
    from campaign.observe.ingest import spool_dir

    with pytest.raises(StoreError, match=r"^the store holds a campaign id .* which is not one campaign writes "
                                         r"\(YYYYmmdd-HHMMSS-xxxx\); it names no folder campaign will use\."):
        spool_dir({"id": cid, "results_dir": str(tmp_path)})
    with open_store(ws.store_url, create=True) as s:
        _campaign(s, cid, ws.results, [_row(0, state="running", job_id="999999990")])
    res = ws.campaign("status")
    assert res.returncode == 2 and res.stderr.startswith(f"error: the store holds a campaign id {cid!r}, which is not")
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr
    res = ws.campaign("ingest", "--all")
    assert res.returncode == 0 and res.stderr.startswith("warning: skipped: the store holds a campaign id"), res.stderr


# ---------------------------------------------------------------- ingest stays within its campaign


def _completed(conn, point_id: int, wall_s: float) -> None:
    conn.execute(insert(attempt), [dict(point_id=point_id, attempt_no=0, state="completed", started_at=1.0,
                                        ended_at=2.0)])
    aid = conn.execute(select(attempt.c.id).where(attempt.c.point_id == point_id)).scalar_one()
    conn.execute(insert(rank_timing), [dict(attempt_id=aid, rank=0, iterations=8, warmup_iterations=1, wall_s=wall_s,
                                            images=64, iter_mean_s=wall_s / 8, iter_median_s=wall_s / 8)])


def _two_campaigns(ws) -> dict:
    """Campaigns A and B in one store, each one completed point (wall_s 0.45); A's spool folder."""
    with open_store(ws.store_url, create=True) as s:
        (a,) = _campaign(s, CID_A, ws.results, [_row(0, state="completed")])
        (b,) = _campaign(s, CID_B, ws.results, [_row(0, state="completed")])
        with s.engine.begin() as conn:
            _completed(conn, a, 0.45)
            _completed(conn, b, 0.45)
    spool = ws.results / "jobs" / CID_A / "spool"
    spool.mkdir(parents=True)
    return {"a": a, "b": b, "spool": spool}


def _op(op, point_id, payload, attempt_no=0):
    return json.dumps({"op": op, "point_id": point_id, "attempt_no": attempt_no, "payload": payload}) + "\n"


def _rewrite(point_id, attempt_no=0, rank=0):
    """What rewrote B's results: a later attempt that completed with 9999 s."""
    return (_op("start", point_id, {"job_id": "1", "world_size": 1, "started_at": 3.0, "provenance": {}}, attempt_no)
            + _op("rank", point_id, {"rank": rank, "tables": {"rank_timing": [
                {"iterations": 8, "warmup_iterations": 1, "wall_s": 9999.0, "images": 64}]}}, attempt_no)
            + _op("finish", point_id, {"state": "completed", "reason": None, "ended_at": 4.0}, attempt_no))


def _state(ws, point_id):
    return (ws.query("select state from point where id = ?", point_id),
            ws.query("select attempt_no, state from attempt where point_id = ? order by attempt_no", point_id),
            ws.query("select wall_s from rank_timing join attempt on attempt.id = attempt_id where point_id = ?",
                     point_id))


def _crafted_files(a: int, b: int) -> dict[str, tuple[str, str]]:
    """File name -> (its text, what the warning says of it)."""
    deep = '{"op": "finish", "point_id": %d, "attempt_no": 0, "payload": %s}\n' % (a, "[" * 100000 + "]" * 100000)
    return {
        f"p{b}-a1-r0.jsonl": (_rewrite(b, 1), f"point {b} is one of campaign '{CID_B}', not of '{CID_A}' whose "
                                              "spool folder holds the file"),
        f"p{a}-a1-r0.jsonl": (_rewrite(b, 1), f"line 1: point_id {b} but the file's name stands for {a}"),
        f"p{a}-a2-r0.jsonl": (_rewrite(a, 1), "line 1: attempt_no 1 but the file's name stands for 2"),
        f"p{a}-a1-r3.jsonl": (_rewrite(a, 1), "line 2: rank 0 but the file's name stands for 3"),
        "results.jsonl": (_rewrite(a, 1), "not a spool file's name (p<point>-a<attempt>-r<rank>.jsonl)"),
        f"p{a}-a1-r1.jsonl": (deep,  # alone: a bad line beside good ones is quarantined by itself (test_edges)
                              "line 1: JSON nested more than 64 levels deep, deeper than campaign reads"),
        f"p{a}-a1-r2.jsonl": (_op("start", a, {"job_id": "1", "world_size": 1, "started_at": 3.0, "provenance": {},
                                              "point_id": b}, 1),
                              "line 1: start with a field the job never writes ('point_id')"),
    }


def test_ingest_applies_nothing_outside_its_campaign_point_attempt_and_rank(ws):
    made = _two_campaigns(ws)
    a, b, spool = made["a"], made["b"], made["spool"]
    before = {p: _state(ws, p) for p in (a, b)}
    files = _crafted_files(a, b)
    for name, (text, _) in files.items():
        (spool / name).write_text(text)
    res = ws.campaign("ingest", CID_A)
    assert res.returncode == 1, res.stdout + res.stderr
    assert res.stdout == (f"ingested 0 spool file(s), 0 operation(s); quarantined {len(files)} malformed file(s) "
                          "(*.bad)\n")
    warnings = res.stderr.splitlines()
    assert len(warnings) == len(files), res.stderr
    for name, (_, why) in files.items():
        line = next(w for w in warnings if f"/{name}: " in w)
        assert line == f"warning: {spool / name}: {why}; renamed to {name}.bad, its operations were not applied"
    assert sorted(p.name for p in spool.iterdir()) == sorted(n + ".bad" for n in files)
    assert {p: _state(ws, p) for p in (a, b)} == before  # B (and A) unchanged: wall_s 0.45, one attempt
    assert before[b][2] == [(0.45,)]


def test_a_spool_file_of_its_own_point_is_still_ingested(ws):
    made = _two_campaigns(ws)
    a, spool = made["a"], made["spool"]
    (spool / f"p{a}-a1-r0.jsonl").write_text(_rewrite(a, 1) + '{"op": "rows", "point_id": ')  # cut short: fine
    res = ws.campaign("ingest", CID_A)
    assert res.returncode == 0 and res.stdout == "ingested 1 spool file(s), 3 operation(s)\n", res.stdout + res.stderr
    assert _state(ws, a)[1] == [(0, "completed"), (1, "completed")]


def test_a_spool_file_that_is_a_link_or_a_fifo_is_quarantined_without_reading_it(ws):
    made = _two_campaigns(ws)
    a, b, spool = made["a"], made["b"], made["spool"]
    elsewhere = ws.path / "b.jsonl"
    elsewhere.write_text(_rewrite(b, 1))
    (spool / f"p{a}-a1-r0.jsonl").symlink_to(elsewhere)
    (spool / f"p{a}-a1-r1.jsonl").symlink_to("/dev/zero")
    os.mkfifo(spool / f"p{a}-a1-r2.jsonl")
    res = ws.campaign("ingest", CID_A, timeout=60)  # a FIFO read would block forever
    assert res.returncode == 1, res.stdout + res.stderr
    assert f"p{a}-a1-r0.jsonl: a symbolic link, not a file the job wrote; renamed to" in res.stderr
    assert f"p{a}-a1-r1.jsonl: a symbolic link, not a file the job wrote; renamed to" in res.stderr
    assert f"p{a}-a1-r2.jsonl: not a regular file (a FIFO, device or folder); renamed to" in res.stderr
    assert _state(ws, b)[2] == [(0.45,)] and elsewhere.read_text() == _rewrite(b, 1)


def test_a_huge_spool_file_or_line_is_one_line_not_a_crash(ws, monkeypatch):
    from campaign.observe import ingest

    made = _two_campaigns(ws)
    a, spool = made["a"], made["spool"]
    path = spool / f"p{a}-a1-r0.jsonl"
    path.write_text(_op("finish", a, {"state": "failed", "reason": "x" * 5000, "ended_at": 4.0}, 1) + _rewrite(a, 1))
    monkeypatch.setattr(ingest, "MAX_LINE_BYTES", 1000)
    too_long = r"^line 1: 5,\d+ (bytes|characters), more than the 1,000 campaign reads$"
    with pytest.raises(ingest.MalformedSpool, match=too_long):
        ingest.read_spool(path, (a, 1, 0))
    monkeypatch.setattr(ingest, "MAX_SPOOL_BYTES", 1000)
    with pytest.raises(ingest.MalformedSpool, match=r"^more than the 1,000 bytes campaign reads from a spool file$"):
        ingest.read_spool(path, (a, 1, 0))


# ---------------------------------------------------------------- read commands import nothing the store names


MARKER_MODULE = '''
import os
open(os.environ["TRUST_MARKER"], "w").write("imported")
from trainers.specs.synthetic import TRAINER  # a declaration, so that the import would succeed
'''


@pytest.mark.parametrize("trainer", [
    {"name": "synthetic", "module": "trust_marker_mod"},
    {"name": "nosuch", "module": "trust_marker_mod"},
    {"name": "trust_marker_mod", "module": None},
])
@pytest.mark.slow
def test_status_imports_no_trainer_module_the_store_names(ws, trainer):
    (ws.path / "trust_marker_mod.py").write_text(MARKER_MODULE)
    marker = ws.path / "imported.txt"
    ws.env.update(PYTHONPATH=os.pathsep.join(filter(None, [str(ws.path), ws.env.get("PYTHONPATH")])),
                  TRUST_MARKER=str(marker))
    config = point_config("gpus=1")
    config["trainer"] = dict(config["trainer"], **trainer)
    with open_store(ws.store_url, create=True) as s:
        _campaign(s, CID_A, ws.results, [_row(0, state="pending", config=config)])
    res = ws.campaign("status", "--json")
    assert res.returncode == 0, res.stderr
    assert not marker.exists(), "status imported a module named in the store"
    view = json.loads(res.stdout)["points"][0]
    assert view["eta_source"].startswith("unknown: ")
    assert "a module named in the store is not imported" in view["eta_source"]
    assert ws.campaign("status").returncode == 0 and not marker.exists()
    for command in (["harvest", CID_A], ["plan", CID_A], ["report", CID_A, "--out", str(ws.path / "r.html")]):
        res = ws.campaign(*command)  # nothing completed: they say so; none imports what the store names
        assert "Traceback" not in res.stderr and not marker.exists(), (command, res.stderr)


def test_a_built_in_trainer_still_gets_its_declared_estimate(ws):
    config = point_config("gpus=1")
    config["trainer"] = dict(config["trainer"], name="sleep", module="trainers.specs.sleep",
                             params={"a_s": 0.012, "b_s": 0.001, "c_s": 0.002})
    with open_store(ws.store_url, create=True) as s:
        _campaign(s, CID_A, ws.results, [_row(0, state="pending", trainer="sleep", config=config)])
    res = ws.campaign("status", "--json")
    assert res.returncode == 0, res.stderr
    view = json.loads(res.stdout)["points"][0]
    assert view["eta_source"] == "the trainer's declared time law" and view["eta_s"] > 0


def test_measured_rates_skip_a_stored_config_nested_too_deep(ws):
    from campaign.observe.measured import measured_rates

    with open_store(ws.store_url, create=True) as s:
        (good, bad) = _campaign(s, CID_A, ws.results, [_row(0, state="completed"), _row(1, state="completed")])
        with s.engine.begin() as conn:
            _completed(conn, good, 0.8)
            _completed(conn, bad, 0.8)
    import sqlite3

    con = sqlite3.connect(ws.db)
    con.execute("update point set config = ? where id = ?", ("[" * 50000 + "]" * 50000, bad))
    con.commit()
    con.close()
    with open_store(ws.store_url, readonly=True) as s:
        rates = measured_rates(s, {"local"}, {"synthetic"})
    assert [m.s_per_it for (m,) in rates.values()] == [pytest.approx(0.1)]
