"""The manual's performance table (docs/performance.md) is what benchmarks/report.py makes of the saved
outputs in benchmarks/results/ (so a figure there is always one a benchmark printed),
and the report renders a saved figure as it was measured."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _module(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", REPO / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_readme_performance_block_is_what_the_saved_outputs_give():
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "report.py"), "--check"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    report = _module("report")
    text = (REPO / "docs" / "performance.md").read_text()
    block = text[text.index(report.BEGIN):text.index(report.END) + len(report.END)]
    assert block == report.render(report.load_results())
    # every saved benchmark is in it, with its command
    for doc in report.load_results():
        assert f"`{doc['command']}`" in block, doc["benchmark"]


def test_saved_figures_render_with_their_spread_goal_and_load(tmp_path):
    common, report = _module("_common"), _module("report")
    figs = [common.figure("t", "harvest to CSV", [1.2, 0.9, 1.05], unit="s", goal="<= 1 s", met=False),
            common.ratio_figure("r", "pandas/harvest", [2.0, 3.0], [1.0, 2.0]),
            common.figure("e", "projection error", [-2.5], unit="%", note="1 pair")]
    path = common.save("demo", command="python benchmarks/demo.py --x", figures=figs, load_start=[3.5, 2.0, 1.0],
                       folder=tmp_path)
    assert path == tmp_path / "demo.json"
    (doc,) = report.load_results(tmp_path)
    assert doc["figures"][0]["median"] == 1.05 and doc["figures"][1]["runs"] == [2.0, 1.5]
    block = report.render([doc])
    assert block.startswith(report.BEGIN) and block.endswith(report.END)
    assert ("| harvest to CSV | **1.05 s** (900 ms .. 1.20 s, 3 runs) | <= 1 s: **missed** | "
            "`python benchmarks/demo.py --x` |") in block
    assert "| pandas/harvest | **1.75x** (1.50x .. 2.00x, 2 runs) |  |" in block
    assert "| projection error (1 pair) | **-2.50 %** (1 run) |" in block
    assert f"load 3.5 -> {doc['load_end'][0]:g}" in block and doc["machine"] in block
    readme = tmp_path / "README.md"
    readme.write_text(f"before\n{report.BEGIN}\nold\n{report.END}\nafter\n")
    assert report.main(["--results", str(tmp_path), "--page", str(readme)]) == 0
    assert readme.read_text() == f"before\n{block}\nafter\n"
    assert report.main(["--results", str(tmp_path), "--page", str(readme), "--check"]) == 0


def test_a_saved_command_line_shows_no_store_password():
    common = _module("_common")
    line = common.command_line("store_writes.py", ["--writers", "16", "--store", "postgresql+psycopg2://u:s3cret@h:5432/db"])
    assert line == "python benchmarks/store_writes.py --writers 16 --store postgresql+psycopg2://u:***@h:5432/db"


def test_a_figure_with_a_bar_in_its_name_stays_in_its_cell(tmp_path):
    common, report = _module("_common"), _module("report")
    common.save("bar", command="python benchmarks/bar.py", load_start=[1.0], folder=tmp_path,
                figures=[common.figure("w", "pairs with |error| <= 3 %", [50.0], unit="%", goal=">= 90 %", met=False)])
    row = next(line for line in report.render(report.load_results(tmp_path)).splitlines() if "error" in line)
    assert "pairs with \\|error\\| <= 3 %" in row
    # five cells: the escaped bars are no column separators
    assert len([c for c in row.replace("\\|", "").split("|")[1:-1]]) == 5, row


def test_suite_time_reads_pytests_closing_line(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))  # as when run as a script
    suite = _module("suite_time")
    out = ("....\n=========== slowest 25 durations ===========\n12.0s call tests/test_x.py::t\n"
           "1440 passed, 8 skipped, 3 warnings in 1146.21s (0:19:06)\n")
    assert suite.closing(out) == ({"passed": 1440, "skipped": 8, "warnings": 3}, 1146.21)
    assert suite.closing("== 905 passed, 596 deselected in 155.02s (0:02:35) ==") == (
        {"passed": 905, "deselected": 596}, 155.02)
    assert suite.closing("no closing line here") is None
    assert suite.main(["--lanes", "slow"]) == 2
    report = _module("report")
    fig = _module("_common").figure("f", "test suite, full lane", [19.14], unit="min", goal="<= 20 min", met=True)
    assert report.cell(fig) == "**19.1 min** (1 run)"
