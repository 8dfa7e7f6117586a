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


def test_one_campaign_of_the_name_by_id_is_harvested_alone_as_before(two, capsys):
    assert main(["harvest", A, "--store", two, "--to", "csv"]) == 0
    out = capsys.readouterr()
    assert out.err == ""  # no note: one campaign, named by its id
    rows = _rows(out.out)
    assert "campaign_id" not in rows[0]
    t = {n: max(w) for (n, _), w in FIRST.items()}
    assert {int(r["gpus"]): float(r["speedup"]) for r in rows} == pytest.approx({1: 1.0, 2: t[1] / t[2]}, rel=REL)
    assert main(["harvest", A, "--store", two]) == 0
    assert capsys.readouterr().out.startswith(f"campaign {A}\n")


def test_an_unknown_campaign_among_several_is_one_line_and_exit_2(two, capsys):
    for command in (["harvest", "nodes", "nope"], ["report", A, "nope"], ["harvest", A, "nope", "--table", "attempts"]):
        assert main([*command, "--store", two]) == 2, command
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("error: no campaign 'nope'"), (command, err)


def test_two_campaigns_report_as_one_page_with_harvests_numbers_and_the_note(two, tmp_path, capsys):
    page = tmp_path / "r.html"
    assert main(["report", "nodes", "--store", two, "--out", str(page)]) == 0
    err = capsys.readouterr().err
    assert f"campaign {B} (nodes)'s newer attempt wins over campaign {A} (nodes)'s" in err
    html = page.read_text()
    assert f"campaigns {A}, {B} (read as one)" in html and "newer attempt wins" in html
    scaling = re.search(r'<table data-table="scaling">(.*?)</table>', html).group(1)
    heads = re.findall(r"<th>([^<]*)</th>", scaling)
    rows = [dict(zip(heads, re.findall(r'<td data-v="([^"]*)"', r))) for r in re.findall(r"<tr>(.*?)</tr>", scaling)[1:]]
    assert {(int(r["gpus"]), r["placement"]): float(r["speedup"]) for r in rows} == \
        pytest.approx({(1, "1x1"): 1.0, (2, "1x2"): 40.0 / 20.0, (4, "2x2"): 40.0 / 12.5}, rel=REL)
    states = re.search(r'<table data-table="states">(.*?)</table>', html).group(1)
    assert states.count(f'data-v="{A}"') == 2 and states.count(f'data-v="{B}"') == 2  # each point, its campaign
    # another campaign beside this one: --compare (several positional campaigns are one)
    assert main(["report", A, "--compare", B, "--store", two, "--out", str(page)]) == 0
    assert f"this campaign (measured) beside {B} (reference)" in page.read_text()


def test_a_study_campaigns_report_shows_its_declared_figures_under_the_studys_numbers(tmp_path, capsys):
    from test_declared_figures import PLATFORMS, _thesis_points, _thesis_wall

    from campaign.harvest.declared import declarations

    cid = "20260301-000000-sw05-thesis-twin"
    url = _store(tmp_path, cid, _thesis_points())
    page = tmp_path / "study.html"
    assert main(["report", cid, "--store", url, "--out", str(page)]) == 0, capsys.readouterr().err
    html = page.read_text()
    assert '<a href="#study">The study&#x27;s figures</a>' in html
    study = html[html.index('<section id="study">'):html.index('<section id="scaling">')]  # before the usual ones
    declared = declarations()["swinv2_thesis"]
    numbers = re.findall(r'<h3 id="([a-z0-9]+)">', study)
    assert numbers == [i.number for i in declared.items]  # every item, in the study's order and numbering
    for item in declared.items:
        assert f'<h3 id="{item.number}">{item.number}: ' in study
        assert (item.unmade is None) == (f'<figure data-figure="{item.number}"' in study
                                         or f'data-table="study-{item.number}"' in study), item.number
    fig02 = study[study.index('<h3 id="fig02">'):study.index('<h3 id="fig03">')]
    assert "<dt>definition</dt><dd>speedup = T_s / T_p (eq. 3.1)" in fig02 and 'src="data:image/svg+xml;base64,' in fig02
    heads = re.findall(r"<th>([^<]*)</th>", fig02)
    rows = [dict(zip(heads, re.findall(r'<td data-v="([^"]*)"', r))) for r in re.findall(r"<tr>(.*?)</tr>", fig02)[1:]]
    for plat, counts in PLATFORMS.items():  # eq. 3.1 by hand: the slowest rank's time at 1 GPU over at N
        t = {n: max(_thesis_wall(plat, n, r) for r in range(n)) for n in counts}
        got = {int(r["gpus"]): float(r["speedup"]) for r in rows if r["platform"] == plat}
        assert got == pytest.approx({n: t[1] / t[n] for n in counts}, rel=REL), plat
    assert "not made: nothing measured" in study  # tab01: a specification, said why as index.json says it
