"""The companion studies' pages (docs/studies/): every table and figure the studies' texts
list has a checklist entry with a command on its page, and every reduced run a page shows
is its study's twin (``dp-twin``, ``vit-twin``): tests/test_study_twins_slurm.py runs each
twin on the local SLURM cluster and then every harvest command of the page that names it,
in page order (each must exit 0 without a traceback, show the twin's points and write the
figures it says it writes). A page launches no reduced campaign of its own (``*-small``):
one would run nowhere.

The commands are parsed from the pages (as tests/test_study_docs.py parses launch lines),
so the pages cannot rot.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

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
            # a harvest of the twin (run by tests/test_study_twins_slurm.py) or of a published
            # campaign (dry-run by tests/test_study_docs.py): either way, a launch line on the page makes it
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


TWINS = {"dataparallel.md": "dp-twin", "vit.md": "vit-twin"}  # run by tests/test_study_twins_slurm.py


def test_every_pages_reduced_run_is_its_studys_twin():
    """Each page launches its study's twin, whose every harvest tests/test_study_twins_slurm.py
    runs, and no reduced campaign of its own (its harvests would run nowhere)."""
    for page, path in PAGES.items():
        assert TWINS[page] in launched_names(path), page
        assert not small_campaigns(path), f"{page}: a reduced campaign beside the twin: {sorted(small_campaigns(path))}"


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
