"""One registry per extension point, and everything that lists its names reads them
from there: executors (campaign.backends.BACKENDS), harvest's tables
(campaign.harvest.tables.TABLES) and export formats (campaign.harvest.export.FORMATS).
Trainers have theirs (tests/test_trainer_registry.py)."""

from __future__ import annotations

# polars at collection: its first import sets _RJEM_MALLOC_CONF, which conftest's
# process-state check would otherwise blame on the first test here to import it
import polars  # noqa: F401
import pytest

from campaign.backends import BACKENDS, EXECUTORS, Backend, get_backend
from campaign.catalogue.config import Executor


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
        required = [p for p in params.values() if p.default is inspect.Parameter.empty]
        # the inputs in order, then options with defaults (e.g. --loss-threshold)
        assert len(required) <= len(spec.inputs) <= len(params), spec.name
        sources = ("points", "phases") if spec.of_points else ("store", "campaign")
        assert all(i in sources or i in TABLES for i in spec.inputs), spec.name
        assert not spec.optional or spec.empty, spec.name


@pytest.fixture
def formats_kept():
    """The export formats as they were, whatever a test registered."""
    from campaign.harvest.export import FORMATS

    saved = dict(FORMATS)
    yield
    FORMATS.clear()
    FORMATS.update(saved)


def test_an_export_format_is_one_registration_the_cli_offers(ws, formats_kept, capsys, tmp_path):
    """A format registered from here (name, extension, writer, binary or not) is what
    ``campaign harvest --to`` takes, ``--help`` lists and refusals name."""
    import gzip

    from campaign.cli import build_parser, main
    from campaign.harvest.export import ExportFormat, register_format
    from test_states import build

    register_format(ExportFormat("tsv", "tsv", lambda df: df.write_csv(separator="\t").encode()))
    register_format(ExportFormat("csvgz", "csv.gz", lambda df: gzip.compress(df.write_csv().encode()), binary=True))
    with pytest.raises(SystemExit):
        build_parser().parse_args(["harvest", "--help"])
    assert "--to FMT table (default), csv, csvgz, json, markdown, parquet or tsv" in " ".join(capsys.readouterr().out.split())

    build(ws.store_url, ws.results)
    store = ["harvest", "--store", ws.store_url]
    assert main([*store, "--to", "tsv"]) == 0
    header, *rows = capsys.readouterr().out.splitlines()
    assert header.split("\t")[:3] == ["view", "platform", "trainer"] and len(rows) == 2  # the two completed points
    assert main([*store, "--table", "all", "--to", "csvgz", "--out", str(tmp_path / "tables")]) == 0
    assert gzip.decompress((tmp_path / "tables" / "scaling.csv.gz").read_bytes()).startswith(b"view,platform,trainer")
    capsys.readouterr()
    assert main([*store, "--to", "csvgz"]) == 2  # binary: a file, never the terminal
    assert capsys.readouterr().err.splitlines()[-1] == "error: csvgz is binary: give a file with --out PATH"
    assert main([*store, "--to", "xlsx"]) == 2
    assert capsys.readouterr().err == ("error: unknown format 'xlsx'; available: csv, csvgz, json, markdown, parquet, "
                                       "table, tsv\n")


def test_a_format_name_is_registered_once():
    from campaign.harvest.export import FORMATS, ExportFormat, register_format

    with pytest.raises(ValueError, match="export format 'csv' is registered already"):
        register_format(ExportFormat("csv", "csv", FORMATS["csv"].writer))
