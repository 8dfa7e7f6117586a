"""Several campaigns read as one (issue #46): ``campaign harvest A B`` and ``campaign report A
B`` (a name: every campaign of it) make one table from a sweep launched in parts, the newer
attempt winning where two campaigns' points collide, in the note ``campaign figures`` writes;
one campaign's output stays as it was. ``campaign report`` of a study campaign shows the
study's declared figures under the study's own numbers. Small crafted stores
(test_declared_figures._store); every number worked out here by hand."""

from __future__ import annotations

import csv
import io
import re

import pytest

from campaign.cli import main
from test_declared_figures import _store

REL = 1e-9
A, B = "20260301-000000-aa01-nodes", "20260302-000000-bb02-nodes"
# (gpus, nodes) -> each rank's wall seconds: the slowest rank's is the point's time T(N)
FIRST = {(1, 1): [40.0], (2, 1): [22.0, 21.0]}
SECOND = {(4, 2): [12.0, 12.5, 11.0, 11.5], (2, 1): [20.0, 19.5]}  # 2 GPUs again: the newer attempt


def _points(walls: dict) -> list[dict]:
    out = []
    for (n, nodes), ranks in walls.items():
        its = 32 // n  # weak scaling: 2 images per GPU, 64 images at every N
        out.append(dict(idx=len(out), platform="local", trainer="sleep", experiment="weak_scaling",
                        dataset="synthetic", gpus=n, nodes=nodes, repeat=0, batch_per_gpu=2, iterations=its,
                        executor="local", state="completed", overrides=[f"gpus={n}"],
                        config={"gpus": n, "experiment": {"scaling": "weak"}},
                        ranks=[dict(wall_s=w, images=2 * its) for w in ranks]))
    return out


@pytest.fixture
def two(tmp_path):
    url = _store(tmp_path, A, _points(FIRST), db="two")
    _store(tmp_path, B, _points(SECOND), db="two")
    return url


def _rows(text: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(text)))


def test_two_campaigns_of_one_name_harvest_as_one_table_by_hand(two, capsys):
    assert main(["harvest", "nodes", "--store", two, "--to", "csv"]) == 0
    out = capsys.readouterr()
    rows = _rows(out.out)
    t1 = max(FIRST[(1, 1)])  # T(1) from the first campaign
    want = {(1, 1): t1 / t1, (2, 1): t1 / max(SECOND[(2, 1)]), (4, 2): t1 / max(SECOND[(4, 2)])}
    assert want == {(1, 1): 1.0, (2, 1): 2.0, (4, 2): 3.2}
    got = {(int(r["gpus"]), int(r["nodes"])): float(r["speedup"]) for r in rows}
    assert got == pytest.approx(want, rel=REL)
    eff = {(int(r["gpus"]), int(r["nodes"])): float(r["efficiency"]) for r in rows}
    assert eff == pytest.approx({k: v / k[0] for k, v in want.items()}, rel=REL)
    assert f"note: 'nodes' names 2 campaigns; reading all of them as one: {A}, {B} (an id picks one)" in out.err
    # the first campaign's 2-GPU point lost to the second's newer attempt: figures' note, word for word
    assert (f"note: local weak_scaling synthetic at 2 GPU(s): campaign {B} (nodes)'s newer attempt wins over "
            f"campaign {A} (nodes)'s") in out.err.splitlines()
    # the same two by id, in either order: the same table
    assert main(["harvest", B, A, "--store", two, "--to", "csv"]) == 0
    assert _rows(capsys.readouterr().out) == rows
