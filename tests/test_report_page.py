"""``campaign report``: one self-contained HTML page of a campaign (campaign/report/).

Its numbers are harvest's (each table cell's ``data-v`` equals ``campaign harvest --to
csv``), store text is escaped, the bytes are the same under any locale and time zone, it
reads the store and never writes it, and bad input is one line with exit 2. And a real
browser: headless Chromium (Debian's ``chromium``; skipped with the reason where it is
missing) opens the file, driven over the Chrome DevTools Protocol (``--remote-debugging-
pipe``, standard library only): no console error, no request leaves the file, every
figure drawn at a non-zero size, the tables' values equal harvest's CSV, a failed point's
reason shown, and a screenshot written for a person to look at (pytest's tmp folder, or
$CAMPAIGN_REPORT_SCREENSHOT).

(tests/test_report.py is the benchmarks' README report, another thing.)
"""

from __future__ import annotations

import base64
import csv
import fcntl
import hashlib
import io
import json
import os
import shutil
import subprocess
import time
from html.parser import HTMLParser
from pathlib import Path

import polars as pl
import pytest

from campaign.report.data import RESUMABLE, gpu_hours_used
from campaign.report.html import esc, utc
from campaign.store import open_store
from test_states import CID, build

HOSTILE = "<script>alert(1)</script>\x1b]0;pwned\x07 & \u202e"


class Cells(HTMLParser):
    """Every table's cells (``data-v`` and shown text) by ``data-table`` name; figures; scripts."""

    def __init__(self):
        super().__init__()
        self.tables: dict[str, list[list[tuple[str, str]]]] = {}
        self.heads: dict[str, list[str]] = {}
        self.figures, self.scripts, self._table, self._cell, self._th = [], 0, None, None, False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table":
            self._table = a.get("data-table")
            self.tables[self._table], self.heads[self._table] = [], []
        elif tag == "tr" and self._table:
            self.tables[self._table].append([])
        elif tag == "td":
            self._cell = [a.get("data-v"), ""]
        elif tag == "th":
            self._th = True
            self.heads[self._table].append("")
        elif tag == "figure":
            self.figures.append(a.get("data-figure"))
        elif tag == "script":
            self.scripts += 1

    def handle_endtag(self, tag):
        if tag == "td":
            self.tables[self._table][-1].append(tuple(self._cell))
            self._cell = None
        elif tag == "th":
            self._th = False
        elif tag == "table":
            self._table = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell[1] += data
        elif self._th:
            self.heads[self._table][-1] += data


def parse(page: str) -> Cells:
    p = Cells()
    p.feed(page)
    for name in p.tables:
        p.tables[name] = [r for r in p.tables[name] if r]  # the head's row has no td
    return p


@pytest.fixture
def store(ws):
    built = build(ws.store_url, ws.results)
    return built


def _report(ws, *args, env=None):
    if env:
        ws.env.update(env)
    return ws.campaign("report", *args)


def _harvest_csv(ws, table="scaling") -> list[dict]:
    res = ws.campaign("harvest", "--to", "csv", "--table", table)
    assert res.returncode == 0, res.stderr
    return list(csv.DictReader(io.StringIO(res.stdout)))


def test_the_tables_are_harvests_csv(ws, store):
    res = _report(ws)
    assert res.returncode == 0, res.stderr
    page = parse(res.stdout)
    assert page.scripts == 0
    for name in ("scaling", "throughput", "utilisation", "hardware"):
        rows = _harvest_csv(ws, name)
        shown = page.heads[name]
        assert len(page.tables[name]) == len(rows) > 0
        for cells, row in zip(page.tables[name], rows):
            for col, (exact, text) in zip(shown, cells):
                assert exact == row[col], (name, col)
                if exact and text != "-":  # the terminal's value: floats to four places
                    try:
                        assert float(text) == round(float(exact), 4)
                    except ValueError:
                        assert text == exact
    # a hand count: 1 GPU in 10 s, 2 GPUs in 6 s: speedup 10/6
    speedups = [float(dict(zip(page.heads["scaling"], [c[0] for c in r]))["speedup"]) for r in page.tables["scaling"]]
    assert speedups == pytest.approx([1.0, 10 / 6])


def test_every_section_the_campaign_has_data_for(ws, store):
    page = _report(ws).stdout
    for key in ("summary", "scaling", "time", "comparison", "failures", "provenance"):
        assert f'<section id="{key}">' in page, key
    assert "6 point(s): 2 completed, 1 spooled, 2 failed, 1 lost" in page
    assert "rank zero blew up" in page  # the failed point's reason, from its log
    assert "job process ended without a result (killed?); see its log" in page
    again = [p for p in ("#2 (failed)", "#3 (failed)", "#4 (lost)")]
    assert f"campaign resume {CID} would rerun 3 point(s): {', '.join(again)}" in page
    assert "<h3>reference</h3>" in page  # the reference study's figures beside the measured ones


def test_another_campaign_is_compared_when_given(ws, store):
    res = _report(ws, CID, CID)
    assert res.returncode == 0, res.stderr
    page = parse(res.stdout)
    assert f"this campaign (measured) beside {CID} (reference)" in res.stdout
    harvested = ws.campaign("harvest", CID, "--compare", CID, "--to", "csv")
    rows = list(csv.DictReader(io.StringIO(harvested.stdout)))
    shown = page.heads["campaign"]
    assert len(rows) > 0
    assert [[v for v, _ in r] for r in page.tables["campaign"]] == [[r[c] for c in shown] for r in rows]


def test_a_newly_registered_table_of_points_gets_its_own_section(monkeypatch):
    from campaign.harvest import tables
    from campaign.report.data import ReportData
    from campaign.report.sections import registered_sections

    spec = tables.TableSpec("toy", "a toy table", "toy: a table of points", "x:y")
    monkeypatch.setitem(tables.TABLES, "toy", spec)
    monkeypatch.setattr(tables, "POINT_TABLES", tables.POINT_TABLES + ("toy",))
    df = pl.DataFrame({"gpus": [1, 2], "predicted_s": [10.0, 5.25]})
    data = ReportData({"id": CID}, [], {"toy": df, "scaling": df}, pl.DataFrame(), [])
    [(key, title, body)] = registered_sections(data)
    assert (key, title) == ("table-toy", "a toy table")
    assert 'data-table="toy"' in body and '<td data-v="5.25">5.25</td>' in body
    assert registered_sections(ReportData({"id": CID}, [], {"toy": df.clear()}, pl.DataFrame(), [])) == []


def test_resume_and_the_report_agree_on_what_reruns():
    from campaign.launch.resume import RESUMABLE as resume_states

    assert RESUMABLE == resume_states


def test_gpu_hours_used_is_every_attempts_elapsed_times_its_gpus():
    df = pl.DataFrame({"gpus": [1, 2, 4], "elapsed_s": [3600.0, 1800.0, None]})
    assert gpu_hours_used(df) == pytest.approx(1.0 + 1.0)
    assert gpu_hours_used(df.filter(pl.col("elapsed_s").is_null())) is None


def test_store_text_is_escaped_and_dates_are_utc(ws, store):
    with open_store(ws.store_url) as s, s.engine.begin() as conn:
        conn.exec_driver_sql("update campaign set name = ?, command = ?", (HOSTILE, HOSTILE))
        conn.exec_driver_sql("update point set reason = ? where idx = 2", (HOSTILE,))
    page = _report(ws, CID).stdout
    assert "<script" not in page and "\x1b" not in page and "\u202e" not in page
    assert esc(HOSTILE) in page and "&lt;script&gt;" in page and "\\x1b" in page
    assert esc("a<b") == "a&lt;b" and utc(0) == "-" and utc(86400.5) == "1970-01-02T00:00:00Z"


def test_the_same_bytes_in_any_locale_and_time_zone(ws, store):
    a = _report(ws, env={"TZ": "UTC", "LC_ALL": "C"})
    b = _report(ws, env={"TZ": "Pacific/Chatham", "LC_ALL": "C.UTF-8", "LANG": "de_DE.UTF-8"})
    assert a.returncode == b.returncode == 0, a.stderr + b.stderr
    assert hashlib.sha256(a.stdout.encode()).digest() == hashlib.sha256(b.stdout.encode()).digest()


def test_it_reads_and_never_writes_the_store(ws, store, tmp_path):
    before = hashlib.sha256(ws.db.read_bytes()).hexdigest()
    out = tmp_path / "deep" / "r.html"
    res = _report(ws, "--out", str(out))
    assert res.returncode == 0 and out.is_file() and f"wrote {out}" in res.stderr
    assert hashlib.sha256(ws.db.read_bytes()).hexdigest() == before


@pytest.mark.parametrize("args,words", [
    (("nosuchcampaign",), "nosuchcampaign"),
    (("--out", "/proc/version/r.html"), "cannot write"),
])
def test_bad_input_is_one_line_and_exit_2(ws, store, args, words):
    res = _report(ws, *args)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    errors = [line for line in res.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and words in errors[0], res.stderr


# ---------------------------------------------------------------- a real browser


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if path := shutil.which(name):
            return path
    return None


class DevTools:
    """The Chrome DevTools Protocol over ``--remote-debugging-pipe``: the browser reads
    commands on fd 3 and writes replies and events on fd 4, each a JSON text ending in NUL."""

    def __init__(self, binary: str, profile: Path):
        r_cmd, self._w = os.pipe()
        self._r, w_out = os.pipe()
        # the child's fds 3 and 4, put in place by bash (from fds above 9, no clash with 3 and 4; dash takes one digit)
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (r_cmd, w_out)]
        os.close(r_cmd)
        os.close(w_out)
        argv = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe", "--no-first-run",
                f"--user-data-dir={profile}", "--window-size=1280,900"]
        moved = f'exec "$0" "$@" 3<&{high[0]} 4>&{high[1]} {high[0]}<&- {high[1]}>&-'
        self.proc = subprocess.Popen(["bash", "-c", moved, *argv], pass_fds=high, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        for fd in high:
            os.close(fd)
        self._buf, self._id, self.events = b"", 0, []

    def _read(self, deadline: float) -> dict:
        while b"\0" not in self._buf:
            if time.monotonic() > deadline:
                raise TimeoutError("chromium did not answer")
            chunk = os.read(self._r, 1 << 16)
            if not chunk:
                raise RuntimeError("chromium closed its pipe")
            self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)

    def call(self, method: str, session: str | None = None, timeout: float = 60, **params) -> dict:
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method: str, timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        for e in self.events:
            if e.get("method") == method:
                return e
        while True:
            e = self._read(deadline)
            self.events.append(e)
            if e.get("method") == method:
                return e

    def close(self):
        try:
            self.call("Browser.close", timeout=10)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._w)
        os.close(self._r)


def open_page(binary: str, page: Path, profile: Path, shot: Path) -> dict:
    """Open ``page`` in headless Chromium: what it logged, requested and drew, its tables'
    ``data-v`` cells, and a full-page screenshot written to ``shot``."""
    cdp = DevTools(binary, profile)
    try:
        target = cdp.call("Target.createTarget", url="about:blank")["targetId"]
        session = cdp.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            cdp.call(f"{domain}.enable", session)
        cdp.call("Page.navigate", session, url=page.as_uri())
        cdp.wait_for("Page.loadEventFired")

        def evaluate(expr: str):
            return cdp.call("Runtime.evaluate", session, expression=expr, returnByValue=True)["result"]["value"]

        figures = evaluate("[...document.querySelectorAll('figure svg')].map(s => {const r = "
                           "s.getBoundingClientRect(); return [s.parentElement.dataset.figure, r.width, r.height]})")
        tables = evaluate("Object.fromEntries([...document.querySelectorAll('table[data-table]')].map(t => "
                          "[t.dataset.table, {head: [...t.querySelectorAll('th')].map(h => h.textContent), rows: "
                          "[...t.querySelectorAll('tbody tr')].map(r => [...r.cells].map(c => c.dataset.v))}]))")
        text = evaluate("document.body.innerText")
        size = evaluate("[document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
        shot_data = cdp.call("Page.captureScreenshot", session, format="png", captureBeyondViewport=True,
                             clip={"x": 0, "y": 0, "width": size[0], "height": min(size[1], 6000), "scale": 1})
        shot.write_bytes(base64.b64decode(shot_data["data"]))
        events = list(cdp.events)
    finally:
        cdp.close()
    errors = [e["params"]["entry"] for e in events if e.get("method") == "Log.entryAdded"
              and e["params"]["entry"]["level"] == "error"]
    errors += [e["params"] for e in events if e.get("method") == "Runtime.exceptionThrown"]
    errors += [e["params"] for e in events if e.get("method") == "Runtime.consoleAPICalled"
               and e["params"]["type"] == "error"]
    requests = [e["params"]["request"]["url"] for e in events if e.get("method") == "Network.requestWillBeSent"]
    return {"errors": errors, "requests": requests, "figures": figures, "tables": tables, "text": text}


@pytest.mark.slow
def test_the_page_in_a_real_browser(ws, store, tmp_path):
    binary = chromium()
    if binary is None:
        pytest.skip("no chromium on this machine: apt-get install chromium (scripts/setup.sh installs it)")
    out = tmp_path / "report.html"
    res = _report(ws, "--out", str(out))
    assert res.returncode == 0, res.stderr
    shot = Path(os.environ.get("CAMPAIGN_REPORT_SCREENSHOT") or tmp_path / "report.png")
    seen = open_page(binary, out, tmp_path / "profile", shot)
    print(f"screenshot of the report page: {shot}")  # pytest -s shows where to look
    assert seen["errors"] == []
    assert seen["requests"] == [out.as_uri()]  # the file itself, nothing else
    assert len(seen["figures"]) >= 5 and all(w > 0 and h > 0 for _, w, h in seen["figures"]), seen["figures"]
    for name in ("scaling", "throughput"):
        rows = _harvest_csv(ws, name)
        table = seen["tables"][name]
        assert [dict(zip(table["head"], r)) for r in table["rows"]] == [
            {k: row[k] for k in table["head"]} for row in rows]
    assert "rank zero blew up" in seen["text"]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000


def test_gpu_hours_estimated_is_the_declared_law_by_hand():
    """trainer=sleep's law, a=0.012 s/image, b=c=0: 4 images per GPU take 0.048 s an
    iteration at 1 and at 2 GPUs; 100 iterations + 10 s start-up = 14.8 s a point, held by
    1 and 2 GPUs: 14.8 x 3 / 3600 GPU-hours. A point without a config has no estimate."""
    from campaign.report.data import gpu_hours_estimated

    config = {"trainer": {"name": "sleep", "params": {"a_s": 0.012, "b_s": 0.0, "c_s": 0.0}},
              "experiment": {"warmup_iterations": 0, "profile_iterations": 0}, "platform": {"name": "local"}}
    points = [{"gpus": g, "nodes": 1, "batch_per_gpu": 4, "iterations": 100, "config": config} for g in (1, 2)]
    assert gpu_hours_estimated(points) == (pytest.approx(14.8 * 3 / 3600), 0)
    assert gpu_hours_estimated(points + [{"gpus": 1, "config": None}]) == (pytest.approx(14.8 * 3 / 3600), 1)
    assert gpu_hours_estimated([{"gpus": 1, "config": None}]) == (None, 1)
