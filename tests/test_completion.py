"""Shell completion as a user gets it: the bash function ``campaign completion bash`` prints,
run by bash on a typed line (and zsh's script checked by zsh where it is installed):
config group values (``study=``, ``platform=``, ``trainer=``), option values (``harvest
--table``, ``--to``), and campaign names and ids from the default store, never a stored
name that the shell would expand."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from campaign.store import open_store

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")


@pytest.fixture(scope="module")
def script() -> str:
    from campaign.cli import build_parser
    from campaign.cli.completion import completion_script

    return completion_script("bash", build_parser())


def complete(script: str, line: str, env: dict | None = None, cwd: Path | None = None) -> list[str]:
    """Run the bash completion function on ``line`` (cursor at its end) and return COMPREPLY;
    ``campaign`` on PATH is this checkout's (the script calls it for campaign names)."""
    words = line.split(" ")
    code = (script + f"\nCOMP_LINE={line!r}; COMP_POINT={len(line)}; COMP_WORDS=({' '.join(repr(w) for w in words)}); "
            f"COMP_CWORD={len(words) - 1}; _campaign; printf '%s\\n' \"${{COMPREPLY[@]}}\"\n")
    out = subprocess.run(["bash", "-c", code], capture_output=True, text=True, check=True, env=env, cwd=cwd,
                         timeout=60)
    return [w for w in out.stdout.splitlines() if w]


def test_config_group_values_study_presets_included(script):
    studies = complete(script, "campaign launch study=")
    assert {"swinv2_thesis", "vit_deepspeed", "dataparallel_a6000"} <= set(studies)
    assert complete(script, "campaign launch study=vit_deeps") == ["vit_deepspeed", "vit_deepspeed_small"]
    assert "vit" in complete(script, "campaign launch trainer=")
    assert complete(script, "campaign launch platform=a100_nv") == ["a100_nvlink_40", "a100_nvlink_80"]


def test_option_values_table_names_and_formats(script):
    from campaign.harvest.export import FORMATS

    tables = complete(script, "campaign harvest --table ")
    assert {"scaling", "throughput", "utilisation", "all"} <= set(tables) and "--to" not in tables
    assert complete(script, "campaign harvest --table thr") == ["throughput"]
    assert sorted(complete(script, "campaign harvest --to ")) == sorted(FORMATS)
    assert complete(script, "campaign datagen --size f") == ["full"]
    assert {"--table", "--to"} <= set(complete(script, "campaign harvest --t"))  # options still complete


@pytest.fixture
def shell_env(tmp_path) -> dict:
    """A PATH whose ``campaign`` is this interpreter's, and a default store of two campaigns,
    one named like a command substitution (a shared store's names are anyone's)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "campaign"
    tool.write_text(f"#!/bin/sh\nexec {sys.executable} -m campaign \"$@\"\n")
    tool.chmod(0o755)
    results = tmp_path / "results"
    results.mkdir()
    marker = tmp_path / "pwned"
    point = dict(idx=0, platform="local", trainer="synthetic", experiment="smoke", dataset="synthetic", gpus=1,
                 nodes=1, repeat=0, executor="local", state="completed", iterations=8, batch_per_gpu=4)
    with open_store(f"sqlite:///{results}/campaign.db", create=True) as store:
        now = time.time()
        store.register({"id": "20261129-080000-abcd", "created_at": now - 10, "name": "weak-v100",
                        "results_dir": str(results)}, [point])
        store.register({"id": "20261129-080100-beef", "created_at": now - 5, "name": f"$(touch {marker})",
                        "results_dir": str(results)}, [point])
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAMPAIGN_")}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", CAMPAIGN_RESULTS=str(results),
               CAMPAIGN_CONFIG_DIR=str(tmp_path / "config"))
    return {"env": env, "marker": marker, "cwd": tmp_path}


def test_campaign_names_and_ids_from_the_default_store(script, shell_env):
    env, cwd = shell_env["env"], shell_env["cwd"]
    assert complete(script, "campaign harvest weak", env, cwd) == ["weak-v100"]
    assert complete(script, "campaign status 20261129-0801", env, cwd) == ["20261129-080100-beef"]
    assert set(complete(script, "campaign report 2026", env, cwd)) == {"20261129-080000-abcd", "20261129-080100-beef"}
    # a stored name the shell would expand is never offered, and never run
    assert all("$(" not in w for w in complete(script, "campaign cancel ", env, cwd))
    assert not shell_env["marker"].exists()
    # launch takes no campaign; an option's value is not a campaign
    assert complete(script, "campaign launch weak", env, cwd) == []


def test_no_store_offers_nothing_and_makes_none(script, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAMPAIGN_")}
    env["CAMPAIGN_RESULTS"] = str(tmp_path / "nowhere")
    proc = subprocess.run([sys.executable, "-m", "campaign", "completion", "campaigns"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")
    assert not (tmp_path / "nowhere").exists()


@pytest.mark.skipif(shutil.which("zsh") is None, reason="no zsh")
def test_the_zsh_script_parses():
    from campaign.cli import build_parser
    from campaign.cli.completion import completion_script

    proc = subprocess.run(["zsh", "-n", "-c", completion_script("zsh", build_parser())], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
