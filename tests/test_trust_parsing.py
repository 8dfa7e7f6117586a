"""Issue 30, parser bombs: JSON that others can write (a shared store's JSON columns, a
profiler trace) read within bounds. Each case is a crafted store or file, as a
colleague's mistake or a compromised job would leave it, read by the real CLI in a
subprocess: a read command neither crashes nor grows past its bounds; it names what
it could not read, in one line, and goes on (status) or refuses (trace)."""

from __future__ import annotations

import json
import os
import sqlite3
import time
import zlib
from pathlib import Path

import pytest

from campaign_trace import TraceError, read_json
from test_postgres import pg_url  # noqa: F401  (fixture: a fresh database on the test server)
from test_states import CID, build

DEEP_ARRAY = "[" * 100_000 + "]" * 100_000
DEEP_OBJECT = '{"a":' * 5_000 + "1" + "}" * 5_000
BOUND = "JSON nested more than 64 levels deep, deeper than campaign reads"


def _no_traceback(res):
    text = res.stdout + res.stderr
    assert "Traceback" not in text and "RecursionError" not in text, text[-3000:]


def _crafted_store(ws) -> dict:
    """test_states.build's campaign (points 0 and 1 completed), then its JSON columns
    rewritten in place as someone who can write the store file would."""
    info = build(ws.store_url, ws.results)
    ids = info["ids"]
    con = sqlite3.connect(ws.db)
    con.execute("UPDATE point SET config = ? WHERE id = ?", (DEEP_ARRAY, ids[0]))
    con.execute("UPDATE point SET overrides = ? WHERE id = ?", (DEEP_OBJECT, ids[2]))
    con.execute("UPDATE campaign SET overrides = ? WHERE id = ?", (DEEP_ARRAY, CID))
    con.commit()
    con.close()
    return info


def _warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("warning: ")]


def test_status_shows_points_whose_stored_json_is_too_deep(ws):
    info = _crafted_store(ws)
    res = ws.campaign("status", "--store", ws.store_url)
    _no_traceback(res)
    assert res.returncode == 0
    assert _warnings(res.stderr) == [
        f"warning: campaign {CID}: its stored overrides are unreadable ({BOUND}); shown without them",
        f"warning: point #0 (id {info['ids'][0]}): its stored config is unreadable ({BOUND}); "
        "shown without it, not harvested",
        f"warning: point #2 (id {info['ids'][2]}): its stored overrides is unreadable ({BOUND}); "
        "shown without it, not harvested",
    ]
    assert "6 point(s): 2 completed" in res.stdout  # every point shown, its state derived as ever


def test_resume_refuses_a_point_whose_stored_json_is_too_deep_naming_the_bound(ws):
    info = _crafted_store(ws)
    before = ws.db.read_bytes()
    res = ws.campaign("resume", CID, "--state", "failed", "--store", ws.store_url, "--dry-run")
    _no_traceback(res)
    assert res.returncode == 2
    assert res.stderr.splitlines()[-1] == (f"error: point #2: its stored overrides are unreadable ({BOUND}): changed in "
                                           "the store since launch; nothing was submitted: launch it anew")
    assert ws.db.read_bytes() == before and info


def test_status_json_shows_them_too(ws):
    _crafted_store(ws)
    res = ws.campaign("status", "--store", ws.store_url, "--json")
    _no_traceback(res)
    assert res.returncode == 0 and len(_warnings(res.stderr)) == 3
    doc = json.loads(res.stdout)
    assert [p["state"] for p in doc["points"]][:2] == ["completed", "completed"]
    assert not doc["campaign"]["overrides"]  # unreadable: shown without it


def test_harvest_leaves_out_a_point_whose_stored_json_is_too_deep(ws):
    info = _crafted_store(ws)
    res = ws.campaign("harvest", "--store", ws.store_url, "--to", "csv")
    _no_traceback(res)
    assert res.returncode == 0, res.stderr
    assert f"warning: point #0 (id {info['ids'][0]}): its stored config is unreadable ({BOUND}); " \
           "shown without it, not harvested" in res.stderr.splitlines()
    import csv
    import io

    rows = list(csv.DictReader(io.StringIO(res.stdout)))
    assert [r["gpus"] for r in rows] == ["2"]  # point 0 (1 GPU) left out, point 1 (2 GPUs) harvested


def test_harvest_with_every_completed_point_unreadable_says_so_in_one_line(ws):
    info = _crafted_store(ws)
    con = sqlite3.connect(ws.db)
    con.execute("UPDATE point SET overrides = ? WHERE id = ?", (DEEP_OBJECT, info["ids"][1]))
    con.commit()
    con.close()
    res = ws.campaign("harvest", "--store", ws.store_url)
    _no_traceback(res)
    assert res.returncode == 1  # README: no completed point to harvest
    assert res.stderr.splitlines()[-1] == \
        f"campaign {CID}: no completed point to harvest yet (see campaign status {CID})"


@pytest.mark.parametrize("value", [DEEP_OBJECT, "not json at all"])
def test_harvest_reads_attempt_json_the_database_cannot_parse_as_null(ws, value):
    """SQLite keeps any text in a JSON column, and its JSON_EXTRACT refuses what is not
    JSON or nests past its own limit ('malformed JSON' ended the whole harvest)."""
    info = build(ws.store_url, ws.results)
    con = sqlite3.connect(ws.db)
    con.execute("UPDATE attempt SET provenance = ? WHERE point_id = ?", (value, info["ids"][1]))
    con.execute("UPDATE rank_timing SET extra = ? WHERE attempt_id IN (SELECT id FROM attempt WHERE point_id = ?)",
                (value, info["ids"][1]))
    con.commit()
    con.close()
    for args in (["--to", "csv"], ["--table", "all"], ["--where", "image=none"]):
        res = ws.campaign("harvest", "--store", ws.store_url, *args)
        _no_traceback(res)
        assert res.returncode == 0, (args, res.stderr)
    assert "error" not in res.stderr


def test_a_too_deep_config_on_postgresql_is_read_as_unreadable(ws, pg_url):  # noqa: F811
    """psycopg parses JSON itself: the engine hands it the same bounded deserializer."""
    from sqlalchemy import create_engine, text

    ws.results.mkdir(parents=True)
    info = build(pg_url, ws.results)
    engine = create_engine(pg_url)
    with engine.begin() as conn:  # 5,000 levels: within what PostgreSQL's json type accepts
        conn.execute(text("UPDATE point SET config = CAST(:v AS json) WHERE id = :id"),
                     {"v": DEEP_OBJECT, "id": info["ids"][0]})
    engine.dispose()
    res = ws.campaign("status", "--store", pg_url)
    _no_traceback(res)
    assert res.returncode == 0
    assert f"warning: point #0 (id {info['ids'][0]}): its stored config is unreadable ({BOUND}); " \
           "shown without it, not harvested" in res.stderr.splitlines()


# ---------------------------------------------------------------- traces

def _gzip_bomb(path: Path, size: int) -> None:
    """A gzip file that expands to ``size`` zero bytes, built 1 MiB at a time."""
    comp = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    chunk = bytes(2**20)
    with open(path, "wb") as fh:
        for _ in range(size // len(chunk)):
            fh.write(comp.compress(chunk))
        fh.write(comp.compress(bytes(size % len(chunk))))
        fh.write(comp.flush())


def _trace_refused(ws, path: Path, message: str):
    res = ws.campaign("trace", str(path))
    _no_traceback(res)
    assert res.returncode == 2, res.stderr  # README: bad input
    assert res.stderr.startswith(f"error: {path}: {message}") and res.stderr.count("\n") == 1, res.stderr


def test_a_deeply_nested_trace_is_one_line(ws, tmp_path):
    path = tmp_path / "deep_trace.json"
    path.write_text('{"traceEvents": [' + DEEP_ARRAY + "]}")
    _trace_refused(ws, path, "JSON nested too deep for the parser")


def test_a_gzip_bomb_stops_at_the_cap(tmp_path):
    path = tmp_path / "bomb.json.gz"
    _gzip_bomb(path, 64 * 2**20 + 1)
    with pytest.raises(TraceError, match=r"expands to more than 67,108,864 bytes, more than a trace campaign reads"):
        read_json(path, max_bytes=64 * 2**20)
    with pytest.raises(TraceError, match=r"holds more than 1,000 bytes"):
        plain = tmp_path / "big.json"
        plain.write_bytes(b" " * 1001)
        read_json(plain, max_bytes=1000)


@pytest.mark.slow
def test_the_reproduction_a_small_gzip_that_expands_past_2_gib(ws, tmp_path):
    """The issue's 9 MB trace that expands to 2 GB ended in MemoryError: refused at the
    real cap (768 MiB decompressed: half of what a trace may take to parse, issue #41), in
    one line, the file a few MB."""
    path = tmp_path / "bomb_trace.json.gz"
    member = tmp_path / "member.gz"
    _gzip_bomb(member, 64 * 2**20)
    with open(path, "wb") as fh:  # gzip members one after another (as gzip reads them): 33 x 64 MiB
        for _ in range(33):
            fh.write(member.read_bytes())
    assert path.stat().st_size < 10 * 2**20
    start = time.monotonic()
    _trace_refused(ws, path, "expands to more than 805,306,368 bytes, more than a trace campaign reads")
    assert time.monotonic() - start < 60


def test_a_trace_that_is_a_fifo_is_refused_without_blocking(ws, tmp_path):
    path = tmp_path / "fifo_trace.json"
    os.mkfifo(path)
    _trace_refused(ws, path, "not a regular file")


def test_a_trace_folder_is_read_as_its_trace_files_and_an_empty_one_is_one_line(ws, tmp_path):
    """``campaign trace DIR`` was an IsADirectoryError traceback (review of 2026-11-26): a
    folder is its *.json and *.json.gz files, sorted; one with none is one line, exit 2; a
    folder given to the reader itself is refused as not a regular file."""
    from campaign_trace import TraceError, read_trace

    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("not a trace")
    _trace_refused(ws, empty, "a folder with no trace file (*.json, *.json.gz) in it; give the trace files")
    with pytest.raises(TraceError, match="not a regular file"):
        read_trace(str(empty))
    folder = tmp_path / "traces"
    folder.mkdir()
    event = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 10, "pid": 1, "tid": 1}
    for name in ("b_trace.json", "a_trace.json"):
        (folder / name).write_text(json.dumps({"traceEvents": [event]}))
    res = ws.campaign("trace", str(folder), "--json")
    _no_traceback(res)
    assert res.returncode == 0, res.stderr
    assert [Path(f["file"]).name for f in json.loads(res.stdout)] == ["a_trace.json", "b_trace.json"]
