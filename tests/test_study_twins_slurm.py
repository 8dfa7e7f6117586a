"""The companion studies' reduced twins complete on the project's local SLURM cluster
(issue #40): ``study=dataparallel_a6000_small`` and ``study=vit_deepspeed_small`` write
their stand-ins at the real split sizes, run their grids (one factor at a time; strong and
weak, CIFAR-10 and -100) and harvest what the studies' figures show: the DataParallel
study's own timings (``study.*`` rows), epochs to its loss threshold with capped runs said
so, the transfer size per epoch; the ViT study's mean time per epoch and per-epoch test
accuracy. Markers ``slurm`` and ``slow``; skipped when the cluster is not up. (ViT under
DDP at 1 and 2 GPUs on SLURM is here, no longer in tests/test_trainers_slurm.py.)"""

from __future__ import annotations

import csv
import io
import re
import shlex
from pathlib import Path

import pytest

from conftest import Workspace

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

PAGES = Path(__file__).resolve().parents[1] / "docs" / "studies"
TWINS = {"dataparallel_a6000_small": ("dataparallel.md", "dp-twin"), "vit_deepspeed_small": ("vit.md", "vit-twin")}


def one_command_block(page: str) -> list[list[str]]:
    """The commands of the page's "The study in one command" block (argv after ``campaign``)."""
    text = (PAGES / page).read_text()
    section = text[text.index("## The study in one command"):]
    block = section[section.index("```") + 3:]
    block = block[block.index("\n") + 1:block.index("```")]
    return [shlex.split(line.split("#", 1)[0])[1:] for line in block.splitlines() if line.startswith("campaign ")]


@pytest.fixture(scope="module")
def twins(study_twins):
    ws, ids, _ = study_twins  # launched beside the reference study's twin (conftest.py)
    return ws, {s: ids[s] for s in TWINS}


def test_the_twins_are_launched_as_their_pages_say():
    from conftest import STUDY_TWINS

    for study, (page, name) in TWINS.items():
        twin = [c for c in one_command_block(page) if c[0] == "launch" and f"study={study}" in c]
        assert twin == [["launch", *STUDY_TWINS[study]]], twin  # the page's own line


def _csv(ws: Workspace, *args: str) -> list[dict]:
    res = ws.campaign("harvest", *args, "--to", "csv")
    assert res.returncode == 0, res.stderr
    return list(csv.DictReader(io.StringIO(res.stdout)))


def test_both_twins_complete_on_stand_ins_of_the_real_sizes(twins):
    ws, ids = twins
    for cid in ids.values():
        states = [s for (s,) in ws.query("select state from point where campaign_id = ?", cid)]
        assert states == ["completed"] * 10, states
    data = ws.results / "datasets"
    assert (data / "mnist-standin" / "MNIST" / "raw" / "STANDIN.txt").is_file()
    assert {"mnist-standin", "cifar10-standin", "cifar100-standin"} <= {p.name for p in data.iterdir()}


def test_the_dataparallel_twin_harvests_the_studys_own_timings_and_stop_rule(twins):
    ws, ids = twins
    cid = ids["dataparallel_a6000_small"]
    rows = _csv(ws, cid, "--table", "breakdown")
    study = {(r["trainer.params.mode"], r["phase"]) for r in rows if r["source"] == "study"}
    assert {("train", "study.compute"), ("train", "study.comm_barrier"), ("inference", "study.compute"),
            ("inference", "study.comm_sync")} <= study
    conv = [r for r in _csv(ws, cid, "--table", "convergence") if r["unit"] == "epoch"]
    trained = {r["idx"] for r in conv if r["stopped"]}
    assert len(trained) == 6 and {r["stopped"] for r in conv if r["stopped"]} == {"capped"}  # 3 epochs < loss 0.1
    assert {r["epoch"] for r in conv if r["idx"] in trained} == {"0", "1", "2"}
    hw = ws.campaign("harvest", cid, "--table", "hardware")
    assert hw.returncode == 0 and "sync_gb_per_epoch_text" in hw.stdout  # Fig 6a in the terminal


def test_the_vit_twin_harvests_the_mean_epoch_time_and_accuracy_per_epoch(twins):
    ws, ids = twins
    cid = ids["vit_deepspeed_small"]
    scaling = _csv(ws, cid)
    assert len(scaling) == 10 and all(float(r["epoch_s"]) > 0 for r in scaling)
    weak = {(r["dataset"], r["gpus"]): r["iterations"] for r in scaling if r["experiment"] == "vit_weak"}
    assert len(set(weak.values())) == 1  # weak by share: every N trains as many iterations
    conv = [r for r in _csv(ws, cid, "--table", "convergence") if r["unit"] == "epoch" and r["test_accuracy"]]
    assert {r["epoch"] for r in conv} == {"0", "1"} and all(0 <= float(r["test_accuracy"]) <= 1 for r in conv)
    # its epoch_time figure: test_the_pages_harvests_of_the_twin_run, whose page line draws it
    phases = {r["phase"] for r in _csv(ws, cid, "--table", "breakdown") if r["source"] == "phases"}
    assert {"forward", "backward", "step"} <= phases  # DDP's phases, as test_trainers_slurm checked them


def twin_harvests(page: str, name: str) -> list[list[str]]:
    """Every harvest command of the page that names the twin, in page order: its
    one-command block's and each figure block's (the figures come from the study's own
    campaign, tests/test_study_pages_run.py checks the checklist names them)."""
    from test_study_pages_run import page_commands

    return [c for c in page_commands(PAGES / page) if c[:2] == ["harvest", name]]


def _files(folder: Path) -> dict[Path, int]:
    return {f: f.stat().st_mtime_ns for f in folder.rglob("*") if f.is_file()} if folder.is_dir() else {}


@pytest.mark.parametrize("study", sorted(TWINS))
def test_the_pages_harvests_of_the_twin_run(twins, study, tmp_path):
    """Every harvest command of the page that names the twin, as the page writes it (its
    figures into this test's folder), exits 0 without a traceback, shows the twin's points
    and writes the figures it asks for (as many fresh, non-empty files as it says, PNG and
    SVG); one that holds a factor's other settings at the twin's defaults (``--where`` on
    settings) shows that factor's points alone. (The pages' reduced lines are the twins':
    tests/test_study_pages_run.py checks no page launches a reduced campaign of its own.)"""
    ws, ids = twins
    page, name = TWINS[study]
    harvests = twin_harvests(page, name)
    block = [c for c in one_command_block(page) if c[0] == "harvest"]
    assert block and all(c[1] == name for c in block) and all(c in harvests for c in block)
    for argv in harvests:
        argv = [str(tmp_path / a) if a.startswith("results/figures") else a for a in argv]
        folder = Path(argv[argv.index("--plots") + 1]) if "--plots" in argv else None
        before = _files(folder) if folder else {}
        res = ws.campaign(*argv)
        assert res.returncode == 0 and "Traceback" not in res.stderr, (argv, res.stderr)
        assert f"campaign {ids[study]}" in res.stdout, argv
        if folder:
            assert list(folder.glob("*.svg")), argv
            wrote = re.search(r"^wrote (\d+) figure files to (.+)$", res.stderr, re.M)
            assert wrote and wrote.group(2) == str(folder), (argv, res.stderr)
            fresh = [f for f, t in _files(folder).items() if before.get(f) != t]
            assert len(fresh) == int(wrote.group(1)) > 0 and all(f.stat().st_size > 0 for f in fresh), (argv, fresh)
            assert {".png", ".svg"} <= {f.suffix for f in fresh}, (argv, fresh)
        if "--where" in argv and "--x" in argv and argv[argv.index("--table") + 1] == "breakdown":
            x = argv[argv.index("--x") + 1]
            drop = {argv.index("--plots"), argv.index("--plots") + 1, argv.index("--x"), argv.index("--x") + 1}
            rows = _csv(ws, *(a for i, a in enumerate(argv[1:], 1) if i not in drop))
            assert len({r[x] for r in rows if x in r}) >= 2, (argv, rows[:3])  # the factor's values, apart
    if study == "vit_deepspeed_small":  # the one-command block's figures: time and mean time per epoch
        assert (tmp_path / "results" / "figures" / "vit-twin" / "epoch_time.svg").is_file()


# ---------------------------------------------------------------- every figure, by the study's numbers (issue #46)

ALL_TWINS = ("swinv2_thesis_small", "dataparallel_a6000_small", "vit_deepspeed_small")


@pytest.mark.parametrize("study", ALL_TWINS)
def test_campaign_figures_on_each_twin_makes_every_item_its_grid_covers(study_twins, study, tmp_path):
    """``campaign figures`` on each reduced twin's campaign (run on the local SLURM cluster)
    writes an index.json listing every table and figure the study's declaration holds, each
    one not declared unmade `made` with its files; ViT's strong-scaling speedup and
    efficiency at every GPU count; the thesis's Figs 6-8 from eq. 3.3 (null on CPU ranks,
    with a note); the DataParallel Fig 1a of study.compute and study.comm_*."""
    import json

    from campaign.harvest.declared import declarations

    ws, ids, _ = study_twins
    out = tmp_path / "figures"
    res = ws.campaign("figures", ids[study], "--out", str(out))
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    index = json.loads((out / "index.json").read_text())
    index = index["items"] if isinstance(index, dict) else index
    declared = next(d for d in declarations().values() if study in (d.study, d.twin))
    assert [e["number"] for e in index] == [i.number for i in declared.items]
    for item, e in zip(declared.items, index):
        if item.unmade is None:
            assert e["status"] == "made", (e["number"], e["status"], e["why"])
            assert e["files"] and all((out / f).is_file() for f in e["files"]), e
        else:
            assert e["status"] == item.unmade.status, e
    rows = lambda number: list(csv.DictReader(io.StringIO((out / f"{number}.csv").read_text())))  # noqa: E731
    if study == "vit_deepspeed_small":
        for number in ("fig12", "fig13"):
            data = rows(number)
            assert {r["gpus"] for r in data} >= {"1", "2"}, (number, data)
            assert all(r.get(c) not in (None, "") for r in data for c in ("speedup", "efficiency")), (number, data)
    if study == "dataparallel_a6000_small":
        phases = {r["phase"] for r in rows("fig01a")}
        assert phases == {"study.compute", "study.comm_barrier"}, phases  # the study's own, never campaign's
    if study == "swinv2_thesis_small":
        for number in ("fig06", "fig07", "fig08"):
            assert (out / f"{number}.csv").is_file(), number
