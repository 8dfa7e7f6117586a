"""What ``campaign plan --launch`` prints for a person to run, from a store others may write
(issue 41, finding 1): whole, quoted ``key=value`` words from validated keys, never a stored
value split into options; a series' overrides only from points signed with the reader's key,
taken from that series' own point (never by a label two roots share)."""

from __future__ import annotations

import json
import shlex
import sqlite3
import time

import pytest

from campaign.harvest.launchline import UnsafeWord, launch_line, word
from campaign.store import open_store
from test_states import CID, _complete, _row

HOSTILE = "sgd --experimental-rerun=/tmp/x.pickle"
ROW = dict(platform="local", trainer="synthetic", experiment="smoke", gpus=2, nodes=1)


def _words(line: str) -> list[str]:
    assert line.startswith("campaign launch ")
    return shlex.split(line)[2:]


def test_a_stored_value_is_one_quoted_word_never_an_option():
    line = launch_line(ROW, [("trainer.optimizer", HOSTILE), ("dataset.root", "/data/a b; rm -rf ~")])
    words = _words(line)
    assert f"trainer.optimizer={HOSTILE}" in words and "dataset.root=/data/a b; rm -rf ~" in words
    assert all(w[0].isalpha() for w in words), words  # no word an option
    assert launch_line(dict(ROW, platform="a; b")).split()[2] == "'platform=a;"  # quoted as one word


@pytest.mark.parametrize("key,value", [("--experimental-rerun", "/tmp/x.pickle"), ("hydra.run.dir", "/tmp"),
                                       ("hydra", "x"), ("a b", "1"), ("trainer.lr", "0.1\n--cfg=job"),
                                       ("trainer.lr", "\x1b]0;title\x07")])
def test_what_cannot_stand_on_a_line_is_refused(key, value):
    with pytest.raises(UnsafeWord):
        word(key, value)


def _store(ws, overrides: list[list[str]], times=(10.0, 6.0, 10.0, 6.0)) -> list[int]:
    rows = [_row(i, gpus=g, state="completed", overrides=o) for i, (g, o) in
            enumerate(zip((1, 2, 1, 2), overrides))]
    with open_store(ws.store_url, create=True) as s:
        ids = s.register({"id": CID, "created_at": time.time(), "name": "demo", "results_dir": str(ws.results)},
                         rows)
        with s.engine.begin() as conn:
            for pid, t in zip(ids, times):
                _complete(conn, pid, t)
    return ids


def _plan_lines(ws) -> tuple[list[str], str]:
    res = ws.campaign("plan", CID, "--budget", "1", "--hours", "1", "--launch")
    assert res.returncode == 0, res.stderr
    return [ln for ln in res.stdout.splitlines() if ln.startswith("campaign launch ")], res.stderr


def test_each_series_gets_its_own_root_and_a_tampered_store_gives_the_axes_alone(ws):
    ws.results.mkdir(parents=True)
    # one dataset name, two roots: two series (the 2-GPU point of root b is the fastest, the cheapest)
    ids = _store(ws, [["gpus=1", "dataset.root=/data/a"], ["gpus=2", "dataset.root=/data/a"],
                      ["gpus=1", "dataset.root=/data/b"], ["gpus=2", "dataset.root=/data/b"]],
                 times=(10.0, 6.0, 9.0, 5.0))
    lines, _ = _plan_lines(ws)
    assert lines and all("dataset.root=/data/b" in _words(ln) for ln in lines), lines
    # someone rewrites a point's overrides in the shared store: its signature no longer holds
    con = sqlite3.connect(ws.db)
    with con:
        con.execute("update point set overrides = ? where id = ?",
                    (json.dumps(["gpus=2", "dataset.root=/data/b", f"trainer.optimizer={HOSTILE}"]), ids[3]))
    con.close()
    before = ws.db.read_bytes()
    lines, err = _plan_lines(ws)
    assert lines, err
    for ln in lines:
        assert "experimental-rerun" not in ln
        assert all(w[0].isalpha() for w in _words(ln))
    # the fastest is the tampered point's series: the axes alone; an untouched signed series keeps its root
    tampered = [ln for ln in lines if "gpus=2" in _words(ln)]
    assert tampered and all("/data/" not in ln for ln in tampered), lines
    assert "not signed with your key" in err and "experimental-rerun" not in err
    assert ws.db.read_bytes() == before  # plan reads only
