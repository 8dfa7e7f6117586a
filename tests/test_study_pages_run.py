"""The companion studies' pages (docs/studies/) run: every reduced launch line (a campaign
named ``*-small``) runs for real on the local default, then every harvest command of the
page that names its campaign, in page order; each must exit 0 without a traceback, print
a table holding the campaign's points and write the figures it says it writes. And every
table and figure the studies' texts list has a checklist entry with a command on its page.

The commands are parsed from the pages (as tests/test_study_docs.py parses launch lines),
so the pages cannot rot. All reduced campaigns are launched first (one store, two private
local locks: two points run at a time) and harvested as each ends.
"""

from __future__ import annotations

import csv
import io
import re
import shlex
from pathlib import Path

import pytest

from conftest import Workspace, campaign_id_from

ROOT = Path(__file__).resolve().parents[1]
PAGES = {p.name: p for p in sorted((ROOT / "docs" / "studies").glob("*.md"))}
REFERENCE = Path("/work/shared/reference")  # the studies' full texts, where this machine has them

# What each text lists. DataParallel (dataparallel-frozen-backbones-a6000.txt): the (a)/(b)
# panels of sections 5.1-5.4 (Figs 1-4) and of the appendix, 7.1 (Fig 5) and 7.2 (Fig 6a).
# ViT (vit-deepspeed-scaling.txt): its captions "Figure N:" and "TABLE I:".
LISTED = {
    "dataparallel.md": ["Fig 1a", "Fig 1b", "Fig 2a", "Fig 2b", "Fig 3a", "Fig 3b", "Fig 4a", "Fig 4b",
                        "Fig 5a", "Fig 5b", "Fig 6a"],
    "vit.md": ["Table I", *(f"Fig {n}" for n in range(1, 18))],
}

COMMAND = re.compile(r"^(campaign (launch|harvest|figures)|python -m campaign(\.launch)?)\s")


def _argv(command: str) -> list[str]:
    """A page command's arguments after ``campaign`` (``campaign launch``'s after ``launch``)."""
    argv = shlex.split(command.split("#", 1)[0])
    return argv[1:] if argv[0] == "campaign" else argv[2:]


def _option(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def page_commands(page: Path) -> list[list[str]]:
    """Every campaign command inside the page's code blocks, in page order (argv after ``campaign``)."""
    out, fenced = [], False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif fenced and COMMAND.match(line):
            out.append(_argv(line))
    return out


def small_campaigns(page: Path) -> dict[str, list[str]]:
    """name -> launch overrides of every reduced launch line (``name=*-small``) of the page."""
    out = {}
    for argv in page_commands(page):
        if argv[0] == "launch":
            name = next((a.split("=", 1)[1] for a in argv if a.startswith("name=")), "")
            if name.endswith("-small"):
                out[name] = argv[1:]
    return out


def harvests_of(page: Path, name: str) -> list[list[str]]:
    return [a for a in page_commands(page) if a[:2] == ["harvest", name]]


def checklist(page: Path) -> dict[str, str]:
    """Text item ("Fig 3a", "Table I") -> its checklist cell (a command in backticks, or
    "none: why")."""
    text = page.read_text()
    head = re.search(r"^## Checklist.*$", text, re.M)
    assert head, f"{page.name} has no '## Checklist' section"
    out = {}
    for row in re.findall(r"^\|([^|]+)\|([^|]+)\|\s*$", text[head.end():], re.M):
        items, cell = (c.strip() for c in row)
        if items in ("Text", "---"):
            continue
        for item in items.split(","):
            out[item.strip()] = cell
    return out


def _sweep(overrides: list[str], key: str) -> set[str]:
    value = next((o.split("=", 1)[1] for o in overrides if o.startswith(key + "=")), "")
    return set(value.split(",")) if value else set()


def table_column(printed: str, column: str) -> list[str]:
    """The values of ``column`` in the first table printed (header, dashes, rows up to a
    blank line or a line that is not a row)."""
    lines = printed.splitlines()
    for i, line in enumerate(lines[1:], 1):
        if re.fullmatch(r"-+(\s+-+)*", line.strip()) and line.strip():
            spans = [m.span() for m in re.finditer(r"-+", line)]
            names = [lines[i - 1][a:b if j < len(spans) - 1 else None].strip() for j, (a, b) in enumerate(spans)]
            if column not in names:
                return []
            a, b = spans[names.index(column)]
            rows = []
            for row in lines[i + 1:]:
                if not row.strip() or row.startswith(("wrote ", "campaign ")):
                    break
                rows.append(row[a:b].strip())
            return rows
    return []


def _figures(folder: Path) -> dict[Path, int]:
    return {f: f.stat().st_mtime_ns for f in folder.rglob("*") if f.is_file()} if folder.is_dir() else {}


@pytest.mark.parametrize("page", sorted(PAGES))
def test_every_listed_table_and_figure_has_a_command_on_its_page(page):
    path = PAGES[page]
    listed = checklist(path)
    assert not set(LISTED[page]) - set(listed), f"{page}: no checklist entry for {set(LISTED[page]) - set(listed)}"
    commands = [shlex.join(a) for a in page_commands(path)]
    for item, cell in listed.items():
        if cell.startswith("none:"):
            assert len(cell) > len("none: ") + 10, f"{page}: {item} names no reason"
            continue
        quoted = re.findall(r"`([^`]+)`", cell)
        assert quoted, f"{page}: {item}: no command"
        for command in quoted:
            argv = _argv(command)
            assert shlex.join(argv) in commands, f"{page}: {item}: `{command}` is not a command on the page"
            assert argv[0] in ("harvest", "figures"), f"{page}: {item}: `{command}` is not a harvest or figures command"
            # a harvest of a reduced campaign (run below) or of a published one (dry-run by
            # tests/test_study_docs.py): either way, a launch line on the page makes it
            launched = {next((a[5:] for a in c if a.startswith("name=")), None) for c in page_commands(path)
                        if c[0] == "launch"}
            assert argv[1] in launched, f"{page}: {item}: no launch line makes campaign {argv[1]}"


def test_the_lists_are_the_texts_captions():
    """LISTED is what the texts list (checked where the texts are on this machine)."""
    vit = REFERENCE / "vit-deepspeed-scaling.txt"
    dp = REFERENCE / "dataparallel-frozen-backbones-a6000.txt"
    if not (vit.exists() and dp.exists()):
        pytest.skip("the studies' texts are not on this machine")
    captions = re.findall(r"^(Figure (\d+)|TABLE (I+)):", vit.read_text(), re.M)
    assert sorted(f"Fig {n}" if n else f"Table {t}" for _, n, t in captions) == sorted(LISTED["vit.md"])
    # the DataParallel text's panels: "(a) ..." / "(b) ..." lines, in figure order (1-4, 5, 6a)
    panels = re.findall(r"^\(([ab])\) ", dp.read_text(), re.M)
    assert len(panels) == len(LISTED["dataparallel.md"])
    assert [p[-1] for p in LISTED["dataparallel.md"]] == panels


@pytest.fixture(scope="module")
def launched(tmp_path_factory) -> tuple[Workspace, dict[str, tuple[str, list[str]]]]:
    """Every reduced campaign of every page, launched into one fresh results folder with
    private local locks: name -> (page, launch overrides)."""
    ws = Workspace(tmp_path_factory.mktemp("studies"))
    ws.env.pop("SLURM_CONF", None)  # the local default, not the test SLURM
    out = {}
    for page, path in PAGES.items():
        for name, overrides in small_campaigns(path).items():
            # two local job locks, the campaigns dealt between them in turn: two points run
            # at a time (a CI machine's two cores), one store (the module's budget: 5 minutes)
            ws.env["CAMPAIGN_LOCK_DIR"] = str(ws.path / f"lock{len(out) % 2}")
            res = ws.campaign("launch", *overrides, timeout=300)
            assert res.returncode == 0, f"{page}: campaign launch {shlex.join(overrides)}\n{res.stderr}{res.stdout}"
            assert "Traceback" not in res.stderr + res.stdout
            campaign_id_from(res.stdout)
            out[name] = (page, overrides)
    return ws, out


def small_ids() -> list[tuple[str, str]]:
    return [(page, name) for page, path in PAGES.items() for name in small_campaigns(path)]


TWINS = {"dataparallel.md": "dp-twin", "vit.md": "vit-twin"}  # run by tests/test_study_twins_slurm.py


def test_every_page_has_a_reduced_campaign_or_a_twin_to_run():
    assert all(small_campaigns(path) or TWINS[page] in launched_names(path) for page, path in PAGES.items())


def test_the_dataparallel_figures_come_from_the_studys_own_twin():
    """Every figure of the DataParallel text is a harvest of the study's twin (one campaign
    of its own grid: tests/test_study_twins_slurm.py runs each of these commands), and
    the page launches no reduced per-figure campaign."""
    path = PAGES["dataparallel.md"]
    for item, cell in checklist(path).items():
        for command in re.findall(r"`([^`]+)`", cell):
            assert _argv(command)[1] == "dp-twin", f"{item}: `{command}`"
    assert {"dp-study", "dp-twin"} <= launched_names(path) and not small_campaigns(path)


def launched_names(page: Path) -> set:
    return {next((a[5:] for a in c if a.startswith("name=")), None) for c in page_commands(page) if c[0] == "launch"}


@pytest.mark.slow
@pytest.mark.parametrize("page,name", small_ids(), ids=lambda v: v)
def test_a_reduced_campaign_runs_and_its_harvests_print_and_draw(page, name, launched):
    ws, campaigns = launched
    overrides = campaigns[name][1]
    status = ws.campaign("status", name, "--wait", timeout=600)
    assert status.returncode == 0, f"{page}: {name} did not complete\n{status.stdout}{status.stderr}"
    harvests = harvests_of(PAGES[page], name)
    assert harvests, f"{page}: no harvest command names {name}"
    gpus = _sweep(overrides, "gpus")
    for argv in harvests:
        shown = f"{page}: campaign {shlex.join(argv)}"
        plots = _option(argv, "--plots")
        folder = ws.path / plots if plots else None
        before = _figures(folder) if folder else {}
        res = ws.campaign(*argv)
        printed = res.stdout + res.stderr
        assert res.returncode == 0, f"{shown}\n{printed}"
        assert "Traceback" not in printed, f"{shown}\n{printed}"
        # the table holds the campaign's points: a row for every GPU count swept (that the
        # command keeps: --gpus)
        column = table_column(res.stdout, "gpus")
        assert column, f"{shown}: no table printed\n{res.stdout}"
        kept = {_option(argv, "--gpus")} if "--gpus" in argv else gpus
        assert set(column) == kept, f"{shown}: GPU counts {sorted(set(column))}, swept {sorted(kept)}"
        x = _option(argv, "--x")
        if x and x != "nodes" and _sweep(overrides, x):  # the x axis's values are a column too
            assert set(table_column(res.stdout, x)) == _sweep(overrides, x), f"{shown}\n{res.stdout}"
        if folder:
            wrote = re.search(r"^wrote (\d+) figure files to (.+)$", printed, re.M)
            assert wrote and wrote.group(2) == plots, f"{shown}: no figure written\n{printed}"
            after = _figures(folder)
            fresh = [f for f, t in after.items() if before.get(f) != t]
            assert len(fresh) == int(wrote.group(1)) > 0, f"{shown}: {wrote.group(0)}, found {fresh}"
            assert all(f.stat().st_size > 0 for f in fresh), f"{shown}: an empty figure file"
            assert any(f.suffix == ".png" for f in fresh) and any(f.suffix == ".svg" for f in fresh)
    if "experiment.validation=true" in overrides:  # a test pass per epoch: accuracy in every point's epochs
        res = ws.campaign("harvest", name, "--table", "convergence", "--to", "csv")
        rows = [r for r in csv.DictReader(io.StringIO(res.stdout)) if r["unit"] == "epoch"]
        assert rows and {r["gpus"] for r in rows} == gpus, f"{page}: {name}: epoch rows\n{res.stdout}{res.stderr}"
        accuracy = [float(r["test_accuracy"]) for r in rows if r["test_accuracy"] not in ("", None)]
        assert accuracy and all(0.0 <= a <= 1.0 for a in accuracy), f"{page}: {name}: test accuracy\n{res.stdout}"


def test_table_column_reads_a_printed_table():
    printed = ("campaign 1\nscaling\n\nplatform    gpus  time_s\n----------  ----  ------\nlocal          1  1.0\n"
               "local          2  0.6\n\nwrote 2 figure files to f\n")
    assert table_column(printed, "gpus") == ["1", "2"]
    assert table_column(printed, "time_s") == ["1.0", "0.6"]
    assert table_column(printed, "nope") == []



def test_an_efficiency_figure_without_any_efficiency_draws():
    """dp-model-small's page command found it: 2 GPUs only (no 1-GPU baseline in any series)
    left no efficiency at all, and the figure's y limit raised (max of one float)."""
    import polars as pl

    from campaign.harvest import plots
    from campaign.harvest.views import scaling_table

    points = pl.DataFrame([{"platform": "local", "trainer": "t", "experiment": "e", "variant": "", "gpus": 2,
                            "repeat": 0, "time_s": 1.0, "batch_per_gpu": 8, "iterations": 10, "timed_iterations": 10,
                            "images": 160, "iter_median_s": 0.1, "projected": False, "time_lo_s": 0.9,
                            "time_hi_s": 1.1}])
    scaling = scaling_table(points)
    assert scaling["efficiency"].drop_nulls().is_empty()
    assert plots.efficiency_figure(scaling).axes[0].get_ylim() == (0.0, 110.0)
