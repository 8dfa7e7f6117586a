"""Inputs at the edges (#25): numbers beyond 64 bits or their caps, non-positive intervals,
escapes in Hydra's messages, scheduler output that is not UTF-8, a results_dir that cannot
be written, a spool file with a corrupt middle line. Each: a known exit status and message
fragment, one line, no traceback, nothing stored."""

from __future__ import annotations

import json
import sys

import pytest

from campaign.common.errors import ConfigError
from campaign.common.numbers import INT64_MAX, int64, parse_int64, positive_seconds, within_cap
from conftest import TINY
from test_states import NOW, _spool_line, build

BEYOND = str(2**63)  # one past the largest 64-bit integer


def _one_line_refusal(res, fragment, code=2):
    assert res.returncode == code, res.stdout + res.stderr
    assert fragment in res.stderr, res.stderr
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr, res.stderr


# ---------------------------------------------------------------- numbers: the one layer


def test_int64_bounds_are_exact():
    assert int64(INT64_MAX, "seed") == INT64_MAX and int64(-(2**63), "seed") == -(2**63)
    with pytest.raises(ConfigError, match=rf"^seed={BEYOND} is beyond a 64-bit integer"):
        int64(2**63, "seed")
    assert parse_int64(" 007 ", "gpus") == 7
    with pytest.raises(ConfigError, match=r"^gpus=9999999999\.\.\.9999 \(4000 digits\) is beyond a 64-bit"):
        parse_int64("9" * 4000, "gpus")  # refused before int(): no digit-limit ValueError
    # a long word is not an integer, not a large one (it read "(26 digits) is beyond a 64-bit integer")
    with pytest.raises(ConfigError, match=r"^gpus takes an integer, got 'abcdefghij\.\.\.wxyz \(26 characters\)'$"):
        parse_int64("abcdefghijklmnopqrstuvwxyz", "gpus")
    with pytest.raises(ConfigError, match=r"^gpus=1_00000000\.\.\.0000 \(4002 digits\) is beyond a 64-bit"):
        parse_int64("1_" + "0" * 4000, "gpus")  # underscores as int() reads them, still refused before int()
    with pytest.raises(ConfigError, match=r"^seed=<an integer of about 1,505 digits> is beyond"):
        int64(10**1505, "seed")  # str() of it is never taken


def test_caps_and_seconds():
    assert within_cap(100, "repeats", 100, "max_repeats") == 100
    with pytest.raises(ConfigError, match=r"^repeats=101 is over the cap of 100 \(max_repeats\)"):
        within_cap(101, "repeats", 100, "max_repeats")
    assert positive_seconds("0.5", "--interval") == 0.5
    for bad in ("-1", "0", "nan", "inf", "x"):
        with pytest.raises(ConfigError, match=r"^--interval (must be a positive|takes a) "):
            positive_seconds(bad, "--interval")


@pytest.mark.parametrize("overrides,message", [
    (["seed=" + BEYOND], f"error: seed={BEYOND} is beyond a 64-bit integer (-9223372036854775808 to "),
    (["seed=" + "9" * 5000], "error: seed: a number of 5,000 digits is beyond a 64-bit integer"),
    (["repeats=1000000000000", "--dry-run"], "error: repeats=1000000000000 is over the cap of 100 (max_repeats)"),
    (["-m", "repeats=1000000000000", "--dry-run"], ": repeats=1000000000000 is over the cap of 100 (max_repeats)"),
    (["-m", "gpus=1,2", "max_points=1", "--dry-run"], "error: this campaign has more than 1 points"),
    (["experiment.base_iterations=2000000000", "--dry-run"],
     "error: experiment.base_iterations=2000000000 is over the cap of 1,000,000,000 (max_iterations)"),
    (["--max-retries", BEYOND, "--dry-run"], f"error: max_retries={BEYOND} is beyond a 64-bit integer"),
], ids=["seed", "seed-5000-digits", "repeats-1e12", "sweep-repeats-1e12", "max_points", "iterations", "max-retries"])
def test_a_number_beyond_its_range_is_refused_at_once(ws, overrides, message):
    head = overrides[:1] if overrides[0] == "-m" else []
    res = ws.launch(*head, *TINY, *overrides[len(head):], timeout=60)  # 10**12 points: the cap comes first
    _one_line_refusal(res, message)
    assert not ws.db.exists()


@pytest.mark.parametrize("argv,message", [
    (["status", "--wait", "--interval", "-1"],
     "error: argument --interval: value must be a positive number of seconds, got -1; see campaign status --help"),
    (["status", "--wait", "--timeout", "0"], "error: argument --timeout: value must be a positive number of seconds"),
    # past what time.sleep can wait (an OverflowError traceback), and a busy loop (review of 2026-11-26)
    (["status", "--wait", "--interval", "1e308"],
     "error: argument --interval: give seconds from 0.1 to 86400 (a day), got 1e308; see campaign status --help"),
    (["status", "--watch", "--interval", "1e-9"], "error: argument --interval: give seconds from 0.1 to 86400"),
    (["harvest", "--gpus", BEYOND], f"error: argument --gpus: value={BEYOND} is beyond a 64-bit integer"),
    (["harvest", "--where", f"gpus=2,{BEYOND}"],
     f"error: --where 'gpus=2,{BEYOND}': gpus takes integers (gpus={BEYOND} is beyond a 64-bit integer"),
    (["cancel", "--point", BEYOND], "error: argument --point: value="),
])
def test_a_cli_number_out_of_range_is_one_line(ws, argv, message):
    res = ws.campaign(*argv, "--store", ws.store_url)
    _one_line_refusal(res, message)
    assert res.stderr.startswith(message)
    assert not ws.db.exists()


# ---------------------------------------------------------------- text from outside


def test_hydras_parse_error_is_printed_with_the_escape_escaped(ws):
    res = ws.launch("gpus=[\x1b[31m", *TINY)
    _one_line_refusal(res, "gpus=[\\x1b[31m")
    assert "\x1b" not in res.stderr and not ws.db.exists()


def test_scheduler_output_that_is_not_utf8_is_read_with_replacement(tmp_path, capsys):
    from campaign.backends.sacct import parse_sacct
    from campaign.common.proc import run

    sacct = tmp_path / "sacct"
    sacct.write_bytes(b"#!/bin/sh\nprintf '41_0|COMPLETED|0:0|00:01|n\\377de1|||\\n41_1|FAILED|1:0|||||\\n'\n")
    sacct.chmod(0o755)
    done = run([str(sacct)])
    assert done.stdout == "41_0|COMPLETED|0:0|00:01|n\ufffdde1|||\n41_1|FAILED|1:0|||||\n"
    rows = parse_sacct(done.stdout)
    assert (rows["41_0"].state, rows["41_1"].state, rows["41_0"].node_list) == ("COMPLETED", "FAILED", "n\ufffdde1")
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "wrote bytes that are not UTF-8 (the first at byte 26)" in err


# ---------------------------------------------------------------- a results_dir that cannot be written


def test_a_results_dir_under_a_file_is_refused_before_anything_is_stored(ws):
    # root writes anywhere chmod forbids: a path under a file is refused by the kernel for anyone
    (ws.path / "afile").write_text("")
    res = ws.launch("-m", "gpus=1", f"results_dir={ws.path}/afile/results", *TINY)
    _one_line_refusal(res, f"error: results_dir's Hydra record folder {ws.path}/afile/results/.hydra cannot be "
                           f"made: {ws.path}/afile is a file, not a folder; choose another one (results_dir=PATH)")
    hydra_file = ws.results / ".hydra"
    hydra_file.parent.mkdir(parents=True)
    hydra_file.write_text("")  # Hydra's record folder taken by a file
    res = ws.launch("-m", "gpus=1", *TINY)
    _one_line_refusal(res, f"error: results_dir's Hydra record folder {hydra_file} is not a folder")
    assert sorted(p.name for p in ws.results.iterdir()) == [".hydra"]  # no store, no jobs folder


# ---------------------------------------------------------------- spool files line by line


def test_a_spool_file_with_a_corrupt_middle_line_has_its_other_records_applied(ws):
    info = build(ws.store_url, ws.results)
    spool = info["folder"] / "spool"
    for f in spool.glob("*.jsonl"):
        f.unlink()
    pid = info["ids"][5]
    corrupt = b'{"op": "rows", "point_id": \xff garbage\n'
    text = (_spool_line("start", pid, {"job_id": "1", "world_size": 1, "started_at": NOW - 5, "provenance": {}})
            .encode() + corrupt + b"\n"
            + _spool_line("finish", pid, {"state": "failed", "reason": "rank 0: after the bad line",
                                          "ended_at": NOW - 1}).encode())
    path = spool / f"p{pid}-a0-r0.jsonl"
    path.write_bytes(text)
    res = ws.campaign("ingest", "--store", ws.store_url)
    assert res.returncode == 1, res.stdout + res.stderr
    assert res.stdout.startswith("ingested 1 spool file(s), 2 operation(s); ")  # build's other points: observed
    assert res.stdout.endswith("; quarantined 1 malformed file(s) (*.bad)\n")
    assert res.stderr == (f"warning: {path}: line 2 is not UTF-8 text (invalid start byte at byte 27); kept in "
                          f"{path.name}.bad, not applied (the file's other lines were)\n")
    assert sorted(p.name for p in spool.iterdir()) == [f"{path.name}.bad", f"{path.name}.ingested"]
    assert (spool / f"{path.name}.bad").read_bytes() == b"2\t" + corrupt  # the line as it was, numbered
    doc = json.loads(ws.campaign("status", "--store", ws.store_url, "--json").stdout)
    assert doc["points"][5]["state"] == "failed" and doc["points"][5]["reason"].startswith("rank 0: after the bad")
