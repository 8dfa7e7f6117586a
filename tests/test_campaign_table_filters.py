"""The tables built from the store rather than the completed points (attempts, convergence)
take --gpus / --platform / --where like the others: they were printed whole, the filter
silently dropped."""

from __future__ import annotations

import csv
import io

from campaign.cli import main
from test_states import build


def _rows(capsys) -> list[dict]:
    return list(csv.DictReader(io.StringIO(capsys.readouterr().out)))


def test_gpus_and_where_narrow_the_attempts_and_convergence_tables(ws, capsys):
    build(ws.store_url, ws.results)
    store = ["harvest", "--store", ws.store_url, "--to", "csv"]
    assert main([*store, "--table", "attempts"]) == 0
    everything = _rows(capsys)
    assert {r["gpus"] for r in everything} == {"1", "2"}
    assert main([*store, "--table", "attempts", "--gpus", "2"]) == 0
    two = _rows(capsys)
    assert two and {r["gpus"] for r in two} == {"2"} and {r["idx"] for r in two} == {"1"}
    assert main([*store, "--table", "attempts", "--where", "gpus=1", "--where", "trainer=nobody"]) == 0
    assert _rows(capsys) == []
    assert main([*store, "--table", "convergence", "--gpus", "2"]) == 0
    assert all(r["gpus"] == "2" for r in _rows(capsys))


def test_an_image_filter_on_a_store_table_is_refused_in_one_line(ws, capsys):
    build(ws.store_url, ws.results)
    before = (ws.results / "campaign.db").read_bytes()
    assert main(["harvest", "--store", ws.store_url, "--table", "attempts", "--where", "image=none"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --where image= narrows the tables of completed points, not --table attempts; "
                   "use --where with platform, trainer, experiment, gpus, nodes, dataset"]
    assert (ws.results / "campaign.db").read_bytes() == before  # a command that reads never writes
