"""docs/cluster.md maps each table and figure of the reference study to what makes it
(issue #39): every one of Tables 1-3 and Figures 1-8 has its row, its caption as the
study's list of tables and figures gives it, a figure file that harvest draws, and a
command that campaign's parser takes; the preset's launch lines dry-run. The reduced
twin's run (tests/test_study_small_slurm.py) draws the figures named.

The study's text is ../shared/reference/swinv2-ddp-scalability-thesis.txt
(``$CAMPAIGN_REFERENCE_TEXT`` elsewhere); the caption test is skipped without it.
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import pytest

from test_study_docs import dry_run

REPO = Path(__file__).resolve().parent.parent
PAGE = REPO / "docs" / "cluster.md"
STUDY = Path(os.environ.get("CAMPAIGN_REFERENCE_TEXT")
             or REPO.parent / "shared" / "reference" / "swinv2-ddp-scalability-thesis.txt")
ROW = re.compile(r"^\| ((?:Table|Figure) \d): ([^|]+?) \| ([^|]+) \| ([^|]+) \|$")


def rows() -> dict[str, tuple[str, str, str]]:
    """'Figure 4' -> (its caption, what campaign gives, what makes it) from the page's table."""
    return {m.group(1): (m.group(2), m.group(3), m.group(4))
            for m in map(ROW.match, PAGE.read_text().splitlines()) if m}


def drawn() -> set[str]:
    """The figures ``campaign harvest --plots`` draws (campaign/harvest/figures.py's names)."""
    source = (REPO / "campaign" / "harvest" / "figures.py").read_text()
    block = source[source.index("    figures = {"):source.index("    }", source.index("    figures = {"))]
    return set(re.findall(r'^\s+"(\w+)":', block, re.M))


def test_every_table_and_figure_of_the_study_has_its_row():
    assert sorted(rows()) == sorted([f"Table {i}" for i in (1, 2, 3)] + [f"Figure {i}" for i in range(1, 9)])


@pytest.mark.skipif(not STUDY.is_file(), reason=f"no study text at {STUDY} (set CAMPAIGN_REFERENCE_TEXT)")
def test_each_caption_is_the_studys_own():
    text = STUDY.read_text()
    listed = text[text.index("## List of Tables"):text.index("## Preface")]
    flat = re.sub(r"\s+", " ", re.sub(r"[\s.·•]+\d+[ \t]*\n", "\n", listed))  # page numbers and dot leaders out
    for name, (caption, _, _) in rows().items():
        assert f"{name}: {caption}" in flat, (name, caption)


def test_each_figure_named_is_one_harvest_draws():
    names = drawn()
    for name, (_, gives, made_by) in rows().items():
        for svg in re.findall(r"`(\w+)\.svg`", gives):
            assert svg in names, (name, svg)
        if name.startswith("Figure"):
            assert re.findall(r"`(\w+)\.svg`", gives), name  # a figure of the study is a figure here
            assert "--plots DIR" in made_by, name


def test_each_command_is_one_campaign_takes():
    from campaign.cli import build_parser

    parser = build_parser()
    for name, (_, _, made_by) in rows().items():
        for command in re.findall(r"`(campaign [^`]+)`", made_by):
            argv = shlex.split(command)[1:]
            if argv[0] == "launch":
                continue  # a launch's arguments are Hydra's: dry-run below
            parser.parse_args([a.replace("DIR", "out") for a in argv])  # exits 2 on an option it does not take


def _launch_lines(page: Path = PAGE) -> list[str]:
    """The page's preset launch lines whose every argument is the project's own (no site
    search path, no '...')."""
    out = []
    for line in page.read_text().replace("\\\n", " ").splitlines():
        line = line.strip()
        if line.startswith("campaign launch") and "study=" in line and "searchpath" not in line and "..." not in line:
            out.append(line.split("#", 1)[0].strip())
    return out


def test_the_page_has_the_preset_first():
    assert _launch_lines()[:2] == ["campaign launch -m study=swinv2_thesis dataset.root=/project/data/ade20k --dry-run",
                                   "campaign launch -m study=swinv2_thesis_small"]


@pytest.mark.parametrize("command", _launch_lines() + _launch_lines(REPO / "README.md"))
def test_a_preset_line_dry_runs(command, tmp_path):
    res = dry_run(shlex.split(command)[2:], tmp_path)
    printed = res.stdout + res.stderr
    assert res.returncode == 0, printed
    assert "every point: study=swinv2_thesis" in printed
    assert not (tmp_path / "results").exists()
