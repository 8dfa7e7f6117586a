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
import hashlib
import io
import os
from html.parser import HTMLParser
from pathlib import Path

import polars as pl
import pytest

from campaign.harvest.export import shown as terminal_value
from campaign.report.data import RESUMABLE, gpu_hours_used
from campaign.report.html import esc, utc
from campaign.store import open_store
from browser import DevTools, chromium
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


@pytest.mark.slow
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
                if exact and text != "-":  # the terminal's value: 4 places, 4 significant digits below 1
                    try:
                        assert float(text) == terminal_value(float(exact))
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
    res = _report(ws, CID, "--compare", CID)  # several positional campaigns are read as one
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


def test_provenance_of_any_stored_shape_is_shown_not_a_traceback():
    # rank_nodes is stored JSON: a number there was unpacked with * (TypeError, a traceback)
    from campaign.report.data import ReportData
    from campaign.report.sections import provenance

    raw = [{"node_list": "n1", "provenance": {"rank_nodes": 3, "host": "h<1>"}},
           {"provenance": {"rank_nodes": ["n2", "n3"]}}]
    html = provenance(ReportData({"id": "c"}, [{"gpus": 2}], {}, pl.DataFrame(), raw))
    assert "<dt>nodes</dt><dd>h&lt;1&gt;, n1, n2, n3</dd>" in html


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


# ---------------------------------------------------------------- the figures (native SVG)


def _marks(svg: str, tag: str) -> list[dict]:
    """Every ``<tag ...>`` element's attributes, with the nearest enclosing ``<g data-*>``'s."""
    class Marks(HTMLParser):
        def __init__(self):
            super().__init__()
            self.stack, self.found = [], []

        def handle_starttag(self, t, attrs):
            a = dict(attrs)
            if t == "g":
                self.stack.append(a)
            elif t == tag:
                group = next((g for g in reversed(self.stack) if any(k.startswith("data-") for k in g)), {})
                self.found.append({**group, **a})

        def handle_endtag(self, t):
            if t == "g":
                self.stack.pop()

    m = Marks()
    m.feed(svg)
    return m.found


def _toy_scaling():
    from campaign.harvest.views import SERIES

    rows = [dict(zip(SERIES, (plat, "sleep", "e", "synthetic 32px 10 classes", None, None, 1), strict=True), gpus=g, projected=g == 4, speedup=s,
                 efficiency=s / g, time_s=10.0 / s, time_lo_s=(9.0 / s if g == 4 else None),
                 time_hi_s=(11.0 / s if g == 4 else None), ideal_time_s=10.0 / g)
            for plat, speedups in (("a100", (1.0, 1.8, 3.2)), ("v100", (1.0, 1.5, 2.5)))
            for g, s in zip((1, 2, 4), speedups)]
    return pl.DataFrame(rows)


def test_the_speedup_figure_carries_its_points_and_draws_them_where_they_are():
    """Each series' markers carry the table's speedups; the y of a marker is its value on
    the axis by hand: ticks 0..5 (the ideal reaches 4, x 1.05 headroom, rounded up to a
    step of 1) over the 300 px plot from y=30: 1.8 at 330 - 1.8/5 x 300 = 222.0."""
    from campaign.report.chart import LEFT, PLOT_W
    from campaign.report.svg import speedup_figure

    df = _toy_scaling()
    svg = speedup_figure(df)
    circles = _marks(svg, "circle")
    got = {(c["data-series"], int(c["data-gpus"])): float(c["data-v"]) for c in circles if "data-v" in c}
    assert got == {(r["platform"], r["gpus"]): r["speedup"] for r in df.iter_rows(named=True)}
    a100 = {int(c["data-gpus"]): c for c in circles if c.get("data-series") == "a100"}
    assert float(a100[2]["cy"]) == 222.0 and float(a100[1]["cy"]) == 330 - 1 / 5 * 300
    xs = [float(a100[g]["cx"]) for g in (1, 2, 4)]  # log 2: equal steps per doubling
    assert LEFT < xs[0] < xs[1] < xs[2] < LEFT + PLOT_W and xs[1] - xs[0] == pytest.approx(xs[2] - xs[1], abs=0.1)
    assert a100[4]["fill"] == "#fff" and a100[2]["fill"] != "#fff"  # projected: hollow
    assert ">5</text>" in svg and "ideal (S = N)" in svg and "projected (hollow)" in svg
    assert 'font-family="sans-serif"' in svg and "<polyline" in svg


def test_the_time_figure_draws_a_projected_points_interval():
    from campaign.report.svg import harvest_figures

    df = _toy_scaling()
    figs = harvest_figures({"scaling": df, "throughput": df.with_columns(images_per_s_per_gpu=pl.col("speedup")),
                            "utilisation": df.with_columns(gpu_util=pl.lit(None, pl.Float64),
                                                           cpu_util=pl.lit(0.5))})
    [four] = [c for c in _marks(figs["training_time"], "circle") if c.get("data-series") == "a100"
              and c.get("data-gpus") == "4"]
    assert (float(four["data-v"]), float(four["data-lo"]), float(four["data-hi"])) == (10 / 3.2, 9 / 3.2, 11 / 3.2)
    assert "no GPU utilisation recorded" in figs["utilisation"]
    assert "platform_comparison" in figs  # two platforms
    assert set(figs) >= {"training_time", "speedup", "efficiency", "throughput", "utilisation"}


def test_the_breakdown_stacks_the_phases_by_hand():
    """Two bars (1 and 2 GPUs) of forward 4 ms + backward 6 ms (1 GPU), 2 + 3 ms (2 GPUs),
    the measured iteration 11 and 5.5 ms: each segment carries its table value, the
    backward segment sits on the forward one, heights in proportion to the milliseconds."""
    from campaign.harvest.views import SERIES
    from campaign.report.svg_bars import breakdown_figure

    base = dict(zip(SERIES, ("a100", "sleep", "e", "synthetic 32px 10 classes", None, None, 1), strict=True))
    rows = [dict(base, gpus=g, phase=ph, label=ph, order=o, per_iteration_s=v, repeats=1)
            for g, vals in ((1, (0.004, 0.006, 0.011)), (2, (0.002, 0.003, 0.0055)))
            for (ph, o), v in zip((("forward", 1), ("backward", 2), ("iteration", 9)), vals)]
    svg = breakdown_figure(pl.DataFrame(rows))
    rects = {(r["data-phase"], int(r["data-gpus"])): r for r in _marks(svg, "rect") if "data-phase" in r}
    assert {k: float(r["data-v"]) for k, r in rects.items()} == {
        ("forward", 1): 0.004, ("backward", 1): 0.006, ("forward", 2): 0.002, ("backward", 2): 0.003}
    for g in (1, 2):
        f, b = rects[("forward", g)], rects[("backward", g)]
        assert float(b["y"]) + float(b["height"]) == pytest.approx(float(f["y"]), abs=0.1)
        assert float(b["height"]) / float(f["height"]) == pytest.approx(1.5, rel=0.02)
    ticks = {int(t["data-gpus"]): float(t["data-v"]) for t in _marks(svg, "line") if t.get("data-phase") == "iteration"}
    assert ticks == {1: 0.011, 2: 0.0055}
    assert "iteration (measured)" in svg and "mean per iteration" in svg
    empty = breakdown_figure(pl.DataFrame(rows).clear())
    assert "no breakdown recorded" in empty and "data-phase" not in empty


def test_the_model_figure_is_the_model_tables_rows():
    """Measured points at their measured time per image, predictions hollow at the fit,
    the fitted line through all five GPU counts, the band and the knee; a series without
    a fit is not drawn, and a table without any fit has no figure."""
    from campaign.report.svg_model import model_figure

    key = {"platform": "a100", "trainer": "sleep", "experiment": "e", "variant": None, "image": None,
           "span": "intra-node"}
    fit = {1: 0.010, 2: 0.0055, 4: 0.0032, 8: 0.0021, 16: 0.0016}
    rows = [dict(key, gpus=g, kind="measured" if g <= 4 else "predicted",
                 t_image_s=(f * 1.01 if g <= 4 else None), fit_t_image_s=f, fit_lo_s=f * 0.9, fit_hi_s=f * 1.1,
                 knee_gpus=4) for g, f in fit.items()]
    rows.append(dict(key, platform="v100", gpus=None, kind="no fit", t_image_s=None, fit_t_image_s=None,
                     fit_lo_s=None, fit_hi_s=None, knee_gpus=None))
    svg = model_figure(pl.DataFrame(rows))
    circles = {int(c["data-gpus"]): c for c in _marks(svg, "circle") if "data-gpus" in c}
    assert {g: float(c["data-v"]) for g, c in circles.items()} == {
        g: (f * 1.01 if g <= 4 else f) for g, f in fit.items()}
    assert [circles[g]["fill"] == "#fff" for g in sorted(circles)] == [False, False, False, True, True]
    [line] = [m for m in _marks(svg, "polyline") if m.get("data-fit")]
    assert len(line["points"].split()) == 5
    assert 'data-knee="4"' in svg and "<polygon" in svg and "v100" not in svg
    assert model_figure(pl.DataFrame(rows[-1:])) is None


def test_the_pages_figures_are_its_tables(ws, store):
    """The page's speedup figure carries exactly harvest's CSV speedups (no matplotlib on
    the way: nothing but native SVG, ``<text>`` in a generic font)."""
    page = _report(ws).stdout
    start = page.index('<figure data-figure="speedup">')
    svg = page[start:page.index("</figure>", start)]
    drawn = sorted((int(c["data-gpus"]), float(c["data-v"])) for c in _marks(svg, "circle") if "data-v" in c)
    harvested = sorted((int(r["gpus"]), float(r["speedup"])) for r in _harvest_csv(ws) if r["speedup"])
    assert drawn == harvested and harvested
    assert "matplotlib" not in page and "<path d=\"M 0" not in page


# ---------------------------------------------------------------- a real browser


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
@pytest.mark.browser
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
