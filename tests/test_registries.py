"""One registry per extension point, and everything that lists its names reads them
from there: executors (campaign.backends.BACKENDS) and harvest's tables
(campaign.harvest.tables.TABLES). Trainers have theirs (tests/test_trainer_registry.py)."""

from __future__ import annotations

import pytest

from campaign.backends import BACKENDS, EXECUTORS, Backend, get_backend
from campaign.config import Executor


def test_every_registered_executor_is_a_backend_and_the_config_enum_names_them():
    assert sorted(e.value for e in Executor) == sorted(EXECUTORS) == sorted(BACKENDS)
    for name in EXECUTORS:
        backend = get_backend(name)
        assert isinstance(backend, Backend) and backend.name == name


def test_an_unknown_executor_names_the_registered_ones():
    with pytest.raises(ValueError, match="unknown executor 'pbs'; available: local, slurm"):
        get_backend("pbs")


def test_the_cli_offers_exactly_the_registered_harvest_tables(capsys):
    from campaign.cli import build_parser
    from campaign.harvest.tables import TABLE_CHOICES, TABLES

    from campaign.harvest.tables import POINT_TABLES

    assert set(TABLE_CHOICES) == {*TABLES, "all"} and TABLE_CHOICES[:len(POINT_TABLES) + 1] == (*POINT_TABLES, "all")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["harvest", "--table", "nosuch"])
    err = capsys.readouterr().err
    choices = ", ".join(f"'{c}'" for c in TABLE_CHOICES)
    assert f"invalid choice: 'nosuch' (choose from {choices})" in err, err
    with pytest.raises(SystemExit):
        build_parser().parse_args(["harvest", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    for name in TABLES:
        assert f"{name}:" in shown, name


def test_every_registered_table_builds_from_a_point_frame():
    """Each entry's builder is importable and takes what the registry says it takes."""
    import importlib
    import inspect

    from campaign.harvest.tables import TABLES

    for spec in TABLES.values():
        module, func = spec.build.split(":")
        params = inspect.signature(getattr(importlib.import_module(module), func)).parameters
        assert len(params) == len(spec.inputs), spec.name
        sources = ("points", "phases") if spec.of_points else ("store", "campaign")
        assert all(i in sources or i in TABLES for i in spec.inputs), spec.name
        assert not spec.optional or spec.empty, spec.name
