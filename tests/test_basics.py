"""The repository's basics (issue 49): LICENSE (MIT, as README and pyproject say), CHANGELOG.md
(Keep a Changelog), CITATION.cff (CFF 1.2.0) and ``campaign --version`` (the installed
version, else pyproject's)."""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

import yaml

from campaign import version as version_module
from campaign.version import PYPROJECT, pyproject_version

ROOT = Path(__file__).resolve().parents[1]
PROJECT_VERSION = pyproject_version(ROOT / "pyproject.toml")


def test_version_prints_the_installed_version(ws):
    res = ws.campaign("--version")
    assert (res.returncode, res.stdout, res.stderr) == (0, f"campaign {PROJECT_VERSION}\n", "")
    assert importlib.metadata.version("campaign") == PROJECT_VERSION == "0.1.0"


def test_version_falls_back_to_pyproject_when_not_installed(monkeypatch):
    def not_installed(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    version_module.version.cache_clear()
    try:
        assert version_module.version() == PROJECT_VERSION
        monkeypatch.setattr(version_module, "PYPROJECT", ROOT / "no-such-pyproject.toml")
        version_module.version.cache_clear()
        assert version_module.version() == version_module.UNKNOWN
    finally:
        version_module.version.cache_clear()
    assert PYPROJECT == ROOT / "pyproject.toml"


def test_only_campaigns_own_project_table_gives_the_version(tmp_path):
    cases = {
        '[project]\nname = "campaign"\nversion = "1.2.3"\n': "1.2.3",
        "[build-system]\nrequires = []\n\n[project]\nname = 'campaign'\nversion = '2.0'\n[tool.x]\nversion = '9'\n": "2.0",
        '[project]\nname = "other"\nversion = "1.2.3"\n': None,  # another project's
        '[project]\nname = "campaign"\n[tool.x]\nversion = "9"\n': None,  # not [project]'s
        "\xff\xfe": None,
    }
    for i, (text, expected) in enumerate(cases.items()):
        path = tmp_path / f"{i}.toml"
        path.write_text(text, encoding="latin-1")
        assert pyproject_version(path) == expected, text
    assert pyproject_version(tmp_path / "missing.toml") is None


def test_license_is_mit_as_readme_and_pyproject_say():
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License\n\nCopyright (c) 2026 the campaign authors\n")
    assert 'THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND' in text
    assert re.search(r'^license = "MIT"$', (ROOT / "pyproject.toml").read_text(), re.M)
    assert "MIT licensed" in (ROOT / "README.md").read_text()


def test_changelog_keeps_a_changelog():
    text = (ROOT / "CHANGELOG.md").read_text()
    assert text.startswith("# Changelog\n") and "https://keepachangelog.com/en/1.1.0/" in text
    releases = re.findall(r"^## (.*)$", text, re.M)
    assert releases[0] == "[Unreleased]"
    assert all(re.fullmatch(r"\[\d+\.\d+\.\d+\] - \d{4}-\d{2}-\d{2}", r) for r in releases[1:]), releases
    kinds = set(re.findall(r"^### (.*)$", text, re.M))
    assert kinds and kinds <= {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}, kinds


# CFF 1.2.0 (https://github.com/citation-file-format/citation-file-format, schema.json): its
# required keys, every top-level key it allows, and the shape of what this file uses.
CFF_REQUIRED = {"cff-version", "message", "title", "authors"}
CFF_KEYS = CFF_REQUIRED | {"abstract", "commit", "contact", "date-released", "doi", "identifiers", "keywords",
                           "license", "license-url", "preferred-citation", "references", "repository",
                           "repository-artifact", "repository-code", "type", "url", "version"}


def test_citation_is_valid_cff_1_2_0():
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert CFF_REQUIRED <= set(cff) <= CFF_KEYS, set(cff) ^ CFF_KEYS
    assert cff["cff-version"] == "1.2.0" and cff["type"] in ("software", "dataset")
    assert isinstance(cff["message"], str) and cff["message"] and isinstance(cff["title"], str) and cff["title"]
    assert cff["authors"] == [{"name": "the campaign authors"}]  # an entity: its name
    assert cff["version"] == PROJECT_VERSION and cff["license"] == "MIT"
    assert cff["keywords"] and all(isinstance(k, str) and k for k in cff["keywords"])
