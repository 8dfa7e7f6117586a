"""README.md and the manual (docs/) tell the truth: every output they show is a marked block
(scripts/readme_blocks.py) checked here against the real command. Exact blocks are run again and compared line for
line; measured ones (the main job's) are compared by shape with a fresh main job (the
known-answer harvest: tests/test_harvest_sleep.py). ``campaign launch --help`` describes
campaign's own options, groups and examples."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("readme_blocks", ROOT / "scripts" / "readme_blocks.py")
rb = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rb)
BLOCKS = rb.all_blocks()


def test_every_block_has_a_kind_and_every_kind_a_block():
    assert set(BLOCKS) == set(rb.KINDS)
    for name, body in BLOCKS.items():
        assert body.startswith("$ campaign "), f"block {name} does not start with the command it shows"


def test_a_block_shown_in_several_files_is_the_same_in_each():
    for path, name, body in rb.copies():
        assert body == BLOCKS[name], f"{path.relative_to(rb.ROOT)}'s copy of block {name} differs from the first " \
                                     f"(python scripts/readme_blocks.py set {name} FILE writes every copy)"
    assert "main-job-harvest" in rb.blocks(rb.README.read_text())  # the front page shows a real run


def _forked(monkeypatch) -> None:
    """readme_blocks's ``python -m campaign ...`` (its only subprocess) forked from the suite's
    preloaded server (tests/forkserver.py) as every other command here is, instead of a new
    interpreter each: the same command, environment and folder, its output as subprocess.run's."""
    from conftest import FORKS

    def run(argv, *, cwd=None, env=None, capture_output, text, timeout=600.0, check=False):
        assert capture_output and text, argv
        forked = FORKS.run(list(argv), dict(os.environ) if env is None else env, Path(cwd or os.getcwd()), timeout)
        if forked is None:  # not a command the server forks: a process of its own, as before
            return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=check)
        proc = subprocess.CompletedProcess(argv, *forked)
        if check:
            proc.check_returncode()
        return proc

    monkeypatch.setattr(rb, "subprocess", SimpleNamespace(run=run))


@pytest.mark.parametrize("name", [n for n, k in rb.KINDS.items() if k == "exact"])
@pytest.mark.slow
def test_an_exact_block_is_what_its_commands_print(name, tmp_path, monkeypatch):
    _forked(monkeypatch)
    env = rb.laptop_env(tmp_path)
    for command, shown in rb.commands(BLOCKS[name]):
        printed = rb.run_shown(command, tmp_path, env)
        problem = rb.matches(shown, printed)
        assert problem is None, f"block {name}, `{command}`: {problem}\n" \
                                f"(python scripts/readme_blocks.py refresh {name} writes it again)"
    assert not (tmp_path / "results" / "campaign.db").exists()  # none of them stored anything
    if name != "launch-refusals":  # a dry run makes nothing at all
        assert not (tmp_path / "results").exists()


def test_shape_keeps_text_and_drops_what_a_run_changes():
    a = ("campaign 20261124-011044-b4bb: 2 of 2\n  #  x\n---  --\n  0  running 40/105 8.9 0:07\n  1  pending - ~0:14\n"
         "2 point(s): 1 running, 1 pending\n[###...] ETA 01:02:03")
    b = ("campaign 20261125-000000-aaaa: 2 of 2\n  #  x\n---  --\n  0  pending - ~1:14\n  1  running 7/55 6.1 0:20\n"
         "2 point(s): 1 running, 1 pending\n[#.....] ETA 11:02:03")  # the other point ran first
    assert rb.shape(a) == rb.shape(b)
    assert rb.shape(a) != rb.shape(b.replace("pending", "failed"))


@pytest.mark.slow
def test_the_main_job_blocks_have_the_shape_the_commands_print(ws, monkeypatch):
    """The main job (scripts/main-job.sh's commands) prints what the README's blocks show,
    up to the numbers, ids and times a run changes. Its status block is the script's
    snapshot (``readme_blocks.py snapshot``, as main-job.sh --readme takes it), whose
    ``campaign status`` every 0.3 s is forked here like every other command of the suite
    (tests/forkserver.py) instead of a new interpreter each. Its training runs half the README's
    600 iterations (as ``BASE_ITERATIONS=300 scripts/main-job.sh`` does): a block's shape has
    no numbers, and its jobs' training was most of this test's CPU; 300 still leave point 0
    seconds of running with a rate for the snapshot to catch."""
    launch = ws.campaign("launch", "-m", "platform=local", "gpus=1,2", "experiment=weak_scaling",
                         "experiment.base_iterations=300", "experiment.profile_iterations=8", "store.heartbeat_s=1",
                         "name=main-job")
    assert launch.returncode == 0, launch.stderr

    def run(argv, capture_output, text, check):
        assert capture_output and text and check and argv[:3] == [sys.executable, "-m", "campaign"], argv
        res = ws.run(*argv)
        if res.returncode:
            raise subprocess.CalledProcessError(res.returncode, argv, res.stdout, res.stderr)
        return res

    monkeypatch.setattr(rb, "subprocess", SimpleNamespace(run=run))
    shot = rb.snapshot("main-job")
    assert shot is not None, "campaign main-job: no point reported its rate while it ran"
    assert ws.campaign("status", "main-job", "--wait").returncode == 0
    harvest = ws.campaign("harvest", "main-job")
    fresh = {"main-job-launch": launch.stdout, "main-job-status": shot, "main-job-harvest": harvest.stdout}
    for name, printed in fresh.items():
        shown = BLOCKS[name].split("\n", 1)[1]  # after its "$ command" line
        assert rb.shape(shown) == rb.shape(printed), f"block {name} (bash scripts/main-job.sh --readme " \
                                                     f"writes it again):\n{printed}"


def test_launch_help_describes_campaigns_options(ws):
    for res in (ws.campaign("launch", "--help"), ws.launch("--help")):
        assert res.returncode == 0, res.stderr
        head = res.stdout.split("== Configuration groups ==")[0]
        for word in ("--dry-run", "--show-scripts", "--json", "--retry CAMPAIGN", "max_gpu_hours=H", "name=NAME",
                     "store.heartbeat_s=S", "examples:", "campaign launch -m platform=local gpus=1,2",
                     "Exit status: 0 submitted"):
            assert word in head, word
        assert "platform: a100, a100_nvlink_40" in res.stdout and "trainer: frozen_backbone, sleep" in res.stdout
