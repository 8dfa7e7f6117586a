"""The manual's reference (campaign/cli/reference.py, built into the site by scripts/docs_hooks.py):
every config key and command option has a meaning, every CAMPAIGN_* variable the code reads
is listed, and the pages hold them all."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from campaign.cli import reference

ROOT = Path(__file__).resolve().parents[1]


def test_every_config_key_has_a_type_and_a_meaning():
    entries = reference.config_entries()
    names = {e.name for e in entries}
    for key in ("platform.partition", "experiment.base_iterations", "dataset.root", "store.url", "container.images",
                "study.name", "gpus", "max_gpu_hours"):
        assert key in names, key
    assert [e.name for e in entries if not e.meaning] == []
    assert [e.name for e in entries if not e.kind] == []
    byname = {e.name: e for e in entries}
    assert byname["experiment.base_iterations"].default == "160000"
    assert byname["experiment.scaling"].kind == "weak \\| strong \\| fixed"
    assert byname["store.url"].default == "(required)"


def test_every_trainers_param_has_a_meaning():
    trainers = reference.trainer_entries()
    assert {"synthetic", "sleep", "frozen_backbone", "vit", "swinv2_upernet"} <= set(trainers)
    missing = [e.name for t, (_, entries) in trainers.items() for e in entries if not e.meaning]
    assert missing == []
    sleep = {e.name: e for e in trainers["sleep"][1]}
    assert sleep["trainer.params.a_s"].default == "0.012"
    assert sleep["trainer.params.a_s"].meaning.startswith("parallel part")


def test_every_commands_option_has_a_meaning():
    commands = reference.command_entries()
    assert {"launch", "resume", "status", "harvest", "plan", "report", "cancel", "ingest", "trace",
            "datagen"} <= set(commands)
    missing = [(c, e.name) for c, (_, entries) in commands.items() for e in entries if not e.meaning]
    assert missing == []
    assert any(e.name.startswith("--max-retries") for e in commands["launch"][1])
    assert any(e.name.startswith("--table") for e in commands["harvest"][1])


def test_a_field_without_a_comment_reads_as_having_no_meaning():
    @dataclasses.dataclass
    class Spec:
        said: int = 1  # what it is
        # said above the field
        above: int = 2
        unsaid: int = 3

    assert reference.field_meanings(Spec) == {"said": "what it is", "above": "said above the field", "unsaid": ""}


def test_every_campaign_variable_the_code_reads_is_listed():
    declared = {name for name, _, _ in reference.ENVIRONMENT}
    found = set()
    for folder in ("campaign", "conf", "trainers", "campaign_datasets", "campaign_trace", "campaign_window", "sql",
                   "hydra_plugins", "scripts"):
        for path in (ROOT / folder).rglob("*"):
            if path.suffix in (".py", ".sh", ".yaml") and path.is_file():
                found |= set(re.findall(r"\bCAMPAIGN_[A-Z0-9_]+\b", path.read_text(errors="replace")))
    not_variables = {"CAMPAIGN_HELP", "CAMPAIGN_COLUMNS"}  # constants' names, not the environment's
    assert sorted(found - declared - not_variables) == []
    assert sorted(declared - found) == []


def test_the_exit_statuses_are_errors_py_constants():
    statuses = {e.default: e for e in reference.exit_entries()}
    assert set(statuses) == {"0", "1", "2", "3", "124", "130"}
    assert all(e.meaning for e in statuses.values())


@pytest.mark.parametrize("page", sorted(reference.PAGES))
def test_each_page_is_markdown_with_one_title_and_a_table(page):
    text = reference.pages()[page]
    assert text.startswith(reference.GENERATED)
    assert len(re.findall(r"^# ", text, re.M)) == 1
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    assert rows and all(line.endswith(" |") for line in rows)
    # each row has as many cells as its table's header: no stray | from a meaning
    for table in re.split(r"\n\n", text):
        lines = [line for line in table.splitlines() if line.startswith("|")]
        if lines:
            cells = {len(re.split(r"(?<!\\)\|", line)) for line in lines}
            assert len(cells) == 1, (page, lines[:3])
