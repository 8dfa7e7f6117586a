"""The companion studies' pages (docs/studies/) cannot rot: every launch line on them
dry-runs (as the README's blocks are checked, tests/test_readme.py), and the studies'
named experiments resolve to the numbers the texts publish."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "docs" / "studies").glob("*.md"))
LAUNCH = re.compile(r"^(campaign launch|python -m campaign\.launch)\s")
# A line that uses a feature not merged yet ends in "# needs: NAME"; it is skipped until
# the feature is there (NAME: what the page's introduction lists).
NEEDS = re.compile(r"#\s*needs:\s*([\w-]+)\s*$")


def launch_lines() -> list[tuple[str, str, str | None]]:
    """(page, command, needs) for every launch line inside a page's code blocks."""
    out = []
    for page in PAGES:
        fenced = False
        for line in page.read_text().splitlines():
            if line.startswith("```"):
                fenced = not fenced
            elif fenced and LAUNCH.match(line):
                needs = NEEDS.search(line)
                command = line.split("#", 1)[0].strip()
                out.append((page.name, command, needs.group(1) if needs else None))
    return out


def dry_run(argv: list[str], home: Path) -> subprocess.CompletedProcess:
    """``campaign launch ARGS --dry-run`` (``-m`` added where missing; ``--json``: the JSON
    dry run) in a fresh folder,
    with no SLURM and no container runtime on the PATH (tests/test_readme.py's laptop)."""
    args = [a for a in argv if a != "--dry-run"]
    if "-m" not in args:
        args = ["-m", *args]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "CAMPAIGN_"))}
    bare = home / ".bin"
    bare.mkdir(exist_ok=True)
    env.update(PATH=str(bare), CAMPAIGN_RESULTS=str(home / "results"), COLUMNS="200",
               PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p))
    flag = [] if "--json" in args else ["--dry-run"]  # --json is a dry run too (and the last flag wins)
    return subprocess.run([sys.executable, "-m", "campaign", "launch", *args, *flag], cwd=home, env=env,
                          capture_output=True, text=True, timeout=300)


def test_every_study_page_has_launch_lines():
    pages = {p for p, _, _ in launch_lines()}
    assert pages == {"dataparallel.md", "vit.md"}


@pytest.mark.parametrize("page,command,needs", launch_lines(), ids=lambda v: v if isinstance(v, str) else None)
def test_a_study_launch_line_dry_runs(page, command, needs, tmp_path):
    if needs:
        pytest.skip(f"needs {needs} (not merged yet)")
    argv = shlex.split(command)
    argv = argv[2:] if argv[0] == "campaign" else argv[3:]
    res = dry_run(argv, tmp_path)
    printed = res.stderr + res.stdout
    assert res.returncode == 0, f"{page}: `{command}`\n{printed}"
    assert not re.search(r"^(error|refused):", printed, re.M), f"{page}: `{command}`\n{printed}"
    assert not (tmp_path / "results").exists()  # a dry run makes nothing


def _schedules(*overrides: str, home: Path) -> dict[int, dict]:
    """GPUs -> the dry run's schedule and experiment of each point (the study's dataset
    named, without its folder: a dry run only notes that, and its size is declared)."""
    res = dry_run(["platform=a100", "--json", *overrides], home)
    assert res.returncode == 0, res.stderr + res.stdout
    points = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
    return {int(p["resources"]["tasks_per_node"]) * int(p["resources"]["nodes"]):
            dict(p["schedule"], experiment=p["config"]["experiment"]) for p in points}


def _five_epochs_or_today(s: dict, per_epoch: int, epochs: int, today: int) -> None:
    """warm-up + timed = epochs x iterations per epoch once experiment.epochs is set in
    the file; until then the count the file's comment works out (``today`` timed)."""
    if s["experiment"].get("epochs") is not None:
        assert s["warmup"] + s["iterations"] == epochs * per_epoch
    else:
        assert s["iterations"] == today
        assert abs(s["warmup"] + s["iterations"] - epochs * per_epoch) <= s["warmup"]


def test_vit_strong_is_the_whole_set_at_64_per_gpu_for_5_epochs(tmp_path):
    # ViT study, section IV-A/IV-C: CIFAR-10's 50,000 images, 64 per GPU, 5 epochs
    got = _schedules("gpus=1,2,4", "trainer=vit", "dataset=cifar10", "experiment=vit_strong", home=tmp_path)
    assert sorted(got) == [1, 2, 4]
    for n, s in got.items():
        assert s["batch_per_gpu"] == 64 and s["grad_accum"] == 1  # global batch 64 x N
        assert s["experiment"]["dataset_fraction_per_gpu"] is None  # the whole training set
        _five_epochs_or_today(s, per_epoch=50_000 // (64 * n), epochs=5, today=3900 // n)
    assert {n: got[n]["iterations"] + got[n]["warmup"] for n in got} == {1: 3905, 2: 1955, 4: 980} \
        or got[1]["experiment"].get("epochs")


def test_vit_weak_is_a_10_percent_share_per_gpu_at_64_for_5_epochs(tmp_path):
    got = _schedules("gpus=1,2,4", "trainer=vit", "dataset=cifar10", "experiment=vit_weak", home=tmp_path)
    for n, s in got.items():
        assert s["batch_per_gpu"] == 64 and s["experiment"]["dataset_fraction_per_gpu"] == 0.1
        share = int(50_000 * min(1.0, 0.1 * n))  # 5,000 images per GPU
        per_epoch = share // (64 * n)
        assert per_epoch == 78
        assert s["warmup"] + s["iterations"] == 5 * per_epoch == 390  # exactly 5 epochs today too


def test_dataparallel_study_is_a_global_batch_of_1024_over_1_to_4_gpus(tmp_path):
    got = _schedules("gpus=1,2,4", "trainer=frozen_backbone", "dataset=mnist", "experiment=dataparallel_study", home=tmp_path)
    assert sorted(got) == [1, 2, 4]
    for n, s in got.items():
        assert s["batch_per_gpu"] * n == 1024  # the study's bolded batch size, split over the GPUs
        per_epoch = 60_000 // 1024  # MNIST's training split
        assert per_epoch == 58
        assert s["warmup"] + s["iterations"] == 50 * per_epoch == 2900
