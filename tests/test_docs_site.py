"""The manual is a site (mkdocs.yml, docs/): it builds with warnings as errors, so a broken
link, a missing anchor or a page left out of the nav fails here; README.md is a front page
whose links all lead somewhere."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MKDOCS = [sys.executable, "-m", "mkdocs"]


def _build(root: Path, site: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run([*MKDOCS, "build", "--strict", "-f", str(root / "mkdocs.yml"), "-d", str(site)],
                          cwd=root, env=env, capture_output=True, text=True, timeout=300)


def test_the_manual_builds_strictly(tmp_path):
    done = _build(ROOT, tmp_path / "site")
    assert done.returncode == 0, done.stderr
    for page in ("getting-started", "commands", "launch", "failures", "measuring", "store", "security", "slurm",
                 "cluster", "studies", "performance", "contributing"):
        assert (tmp_path / "site" / f"{page}.html").exists(), page  # the offline plugin: no directory URLs
    for page in ("config", "commands", "environment", "exit-status"):  # generated at the build (scripts/docs_hooks.py)
        assert "<th>meaning</th>" in (tmp_path / "site" / "reference" / f"{page}.html").read_text(), page


@pytest.mark.parametrize("damage", ["a link to a page that is not there", "a link to a missing anchor",
                                    "a page left out of the nav"])
def test_a_broken_manual_fails_its_build(tmp_path, damage):
    copy = tmp_path / "repo"
    copy.mkdir()
    shutil.copy(ROOT / "mkdocs.yml", copy)
    (copy / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "docs_hooks.py", copy / "scripts")
    shutil.copytree(ROOT / "docs", copy / "docs")
    page = copy / "docs" / "commands.md"
    if damage == "a link to a page that is not there":
        page.write_text(page.read_text() + "\nSee [nowhere](no-such-page.md).\n")
    elif damage == "a link to a missing anchor":
        page.write_text(page.read_text() + "\nSee [nowhere](store.md#no-such-section).\n")
    else:
        (copy / "docs" / "orphan.md").write_text("# Orphan\n")
    done = _build(copy, tmp_path / "site")
    assert done.returncode != 0, damage
    assert "WARNING" in done.stderr, done.stderr


def test_the_readme_is_a_front_page_whose_links_lead_somewhere():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    # its two set-up commands, and the three of a campaign
    for line in ("bash scripts/main-job.sh ", "bash scripts/run-tests.sh ", "campaign launch -m",
                 "campaign status", "campaign harvest"):
        assert line in text, line
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    assert len(targets) >= 10
    for target in targets:
        if not target.startswith(("http://", "https://")):
            assert (ROOT / target).exists(), f"README.md links to {target}, which is not there"
    # every page of the manual is reachable from the front page's table of pages or the site's nav
    nav = (ROOT / "mkdocs.yml").read_text()
    for page in sorted((ROOT / "docs").rglob("*.md")):
        rel = page.relative_to(ROOT / "docs").as_posix()
        assert f": {rel}" in nav, f"docs/{rel} is in no nav entry of mkdocs.yml"
