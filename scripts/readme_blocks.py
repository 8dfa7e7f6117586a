"""The outputs README.md and the manual (docs/) show, kept true: each is a marked block made
by running the real command, and tests/test_readme.py checks every one against a fresh run.

A block in README.md or a page of docs/ (a block may stand in several files: ``set`` and
``refresh`` write every copy, and the tests check every copy)::

    <!-- output: NAME -->
    ```text
    $ campaign launch ...
    ...what it printed...
    ```
    <!-- /output -->

Two kinds (``KINDS``):

- ``exact``: the commands' output is the same on any machine (refusals, dry runs); the
  block is compared line for line (a line ending in ``...`` is a prefix). ``refresh``
  runs them again in a fresh folder, ``/home/me/study``'s stand-in, with no container
  runtime or SLURM on PATH (as on a laptop);
- ``measured``: what a real run printed (times, ids, rates): compared by shape, i.e.
  with numbers, durations, ids and bars made placeholders (``shape``), table rows as a
  set. ``bash scripts/main-job.sh --readme`` writes the main job's blocks and figure;
  ``refresh`` writes the known-answer campaign's.

    python scripts/readme_blocks.py list                 # the blocks and their kinds
    python scripts/readme_blocks.py refresh [NAME...]    # run the exact blocks (and sleep-harvest) again
    python scripts/readme_blocks.py set NAME FILE        # put FILE into block NAME (main-job.sh)
    python scripts/readme_blocks.py snapshot CAMPAIGN    # campaign status once a point reports its rate
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional, Sequence

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
HOME = "/home/me/study"  # where the exact blocks say they ran (a test's folder stands in for it)
BLOCK = re.compile(r"<!-- output: (?P<name>[\w-]+) -->\n```text\n(?P<body>.*?)```\n<!-- /output -->", re.S)
KINDS = {
    "launch-refusals": "exact",
    "dry-run": "exact",
    "show-scripts": "exact",
    "main-job-launch": "measured",
    "main-job-status": "measured",
    "main-job-harvest": "measured",
    "sleep-harvest": "measured",
}
# the known-answer campaign of sleep-harvest (tests/test_harvest_sleep.py runs the same)
SLEEP_LAW = ["trainer=sleep", "gpus=1,2,4", "platform.gpus_per_node=4", "experiment=weak_scaling",
             "trainer.params.a_s=0.024", "trainer.params.b_s=0.002", "trainer.params.c_s=0.002",
             "experiment.images_per_gpu=2", "experiment.base_iterations=128", "experiment.warmup_iterations=1"]


def blocks(text: str) -> dict[str, str]:
    """NAME -> the block's text (what is between its fences)."""
    return {m["name"]: m["body"] for m in BLOCK.finditer(text)}


def files() -> list[Path]:
    """The files that may hold blocks: README.md and every page of the manual."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def all_blocks() -> dict[str, str]:
    """NAME -> the block's text, over README.md and docs/ (the first copy of each)."""
    found: dict[str, str] = {}
    for path in files():
        for name, body in blocks(path.read_text()).items():
            found.setdefault(name, body)
    return found


def copies() -> list[tuple[Path, str, str]]:
    """Every block in every file: (file, NAME, text)."""
    return [(path, name, body) for path in files() for name, body in blocks(path.read_text()).items()]


def write_block(name: str, body: str) -> list[Path]:
    """Put ``body`` into every copy of block ``name``; the files written (KeyError when none holds it)."""
    written = []
    for path in files():
        text = path.read_text()
        if name in blocks(text):
            path.write_text(replace(text, name, body))
            written.append(path)
    if not written:
        raise KeyError(f"no block '{name}' in README.md or docs/")
    return written


def replace(text: str, name: str, body: str) -> str:
    """``text`` with block ``name``'s body replaced (KeyError when it has none)."""
    found = [m for m in BLOCK.finditer(text) if m["name"] == name]
    if not found:
        raise KeyError(f"README.md has no block '{name}'")
    m = found[0]
    body = body if body.endswith("\n") else body + "\n"
    return text[:m.start("body")] + body + text[m.end("body"):]


def commands(body: str) -> list[tuple[str, list[str]]]:
    """The block's ``$ command`` lines, each with the lines it printed."""
    out: list[tuple[str, list[str]]] = []
    for line in body.splitlines():
        if line.startswith("$ "):
            out.append((line[2:], []))
        elif out:
            out[-1][1].append(line)
    return out


def matches(shown: Sequence[str], printed: Sequence[str]) -> Optional[str]:
    """None when ``printed`` is what ``shown`` says (a shown line ending in ``...`` is a
    prefix), else the first difference."""
    if len(shown) != len(printed):
        return f"{len(shown)} line(s) shown, {len(printed)} printed:\n" + "\n".join(printed)
    for a, b in zip(shown, printed):
        ok = b.startswith(a[:-3]) if a.endswith("...") else a == b
        if not ok:
            return f"shown:   {a}\nprinted: {b}"
    return None


_ID = re.compile(r"\b\d{8}-\d{6}-[0-9a-f]{4}\b")
_CLOCK = re.compile(r"\b\d{1,2}:\d{2}:\d{2}\b|\b\d+:\d{2}\b")
_NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:,\d{3})*(?:\.\d+)?(?:e[-+]?\d+)?(?![\w])")
_BAR = re.compile(r"\[[#.]+\]")
# a line that ends a table: blank, the states' counts, the bar, the estimate and its sources, notes
_AFTER_TABLE = re.compile(r"^(\s*$|\[|estimate:|\d+ point\(s\)|  rate of |note:|follow it:|results:)")


def shape(text: str) -> list[object]:
    """What a measured output must keep: its lines with ids, clock times and durations,
    numbers and progress bars as placeholders, spaces collapsed; a table's rows as one
    sorted tuple (the order points run in is the scheduler's)."""
    out: list[object] = []
    rows: list[str] = []
    in_table = False
    for line in text.splitlines():
        norm = _BAR.sub("[BAR]", line)
        norm = _ID.sub("ID", norm)
        norm = _CLOCK.sub("T", norm)
        norm = _NUMBER.sub("N", norm)
        norm = " ".join(norm.split())
        if re.match(r"^-+( +-+)+$", line.strip()):
            in_table = True
            out.append("----")
            continue
        if in_table and not _AFTER_TABLE.match(line):
            rows.append(norm)
            continue
        if in_table:
            out.append(tuple(sorted(rows)))
            rows, in_table = [], False
        out.append(norm)
    if rows:
        out.append(tuple(sorted(rows)))
    return out


# ------------------------------------------------------------------ running the commands


def laptop_env(home: Path) -> dict[str, str]:
    """The environment the exact blocks run in: a fresh results folder, and a PATH with
    no container runtime and no SLURM (as on a laptop)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "CAMPAIGN_"))}
    bare = home / ".bin"
    bare.mkdir(exist_ok=True)
    env.update(PATH=str(bare), CAMPAIGN_RESULTS=str(home / "results"), COLUMNS="200")
    return env


def run_shown(command: str, home: Path, env: dict[str, str]) -> list[str]:
    """Run a block's ``campaign ...`` command as the CLI (stderr, then stdout), the
    folder ``home`` written as ``HOME``."""
    argv = shlex.split(command)
    assert argv[0] == "campaign", command
    proc = subprocess.run([sys.executable, "-m", "campaign", *argv[1:]], cwd=home, env=env, capture_output=True,
                          text=True, timeout=600)
    text = (proc.stderr + proc.stdout).replace(str(home), HOME)
    return text.rstrip("\n").splitlines()


def run_exact(body: str) -> str:
    """The exact block ``body`` made again: each of its commands run in a fresh folder."""
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        env = laptop_env(home)
        out = []
        for command, shown in commands(body):
            printed = run_shown(command, home, env)
            kept = [s if s.endswith("...") and p.startswith(s[:-3]) else p for s, p in zip(shown, printed)]
            out += [f"$ {command}", *kept, *printed[len(kept):]]
        return "\n".join(out) + "\n"


RUNNING_WITH_RATE = re.compile(r"\brunning\s+\d+/\d+\s+\d[\d.]*\s")


def snapshot(ref: str, timeout_s: float = 600.0) -> Optional[str]:
    """``campaign status REF`` as it printed at the first moment one of its points showed
    its rate; None when every point ended (or ``timeout_s`` passed) before that."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        text = subprocess.run([sys.executable, "-m", "campaign", "status", ref], capture_output=True, text=True,
                              check=True).stdout
        if RUNNING_WITH_RATE.search(text):
            return text
        if "every point has ended" in text:
            return None
        time.sleep(0.3)
    return None


def sleep_harvest() -> str:
    """The known-answer campaign run for real, and what ``campaign harvest`` printed."""
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        env = laptop_env(home)
        env["PATH"] = os.environ["PATH"]
        launch = subprocess.run([sys.executable, "-m", "campaign", "launch", "-m", *SLEEP_LAW], cwd=home, env=env,
                                capture_output=True, text=True, check=True)
        assert "3 of 3 point(s) submitted" in launch.stdout, launch.stdout + launch.stderr
        subprocess.run([sys.executable, "-m", "campaign", "status", "--wait", "--interval", "0.5"], cwd=home, env=env,
                       capture_output=True, check=True)
        out = subprocess.run([sys.executable, "-m", "campaign", "harvest"], cwd=home, env=env, capture_output=True,
                             text=True, check=True).stdout
    return "$ campaign harvest\n" + out


def main(argv: Sequence[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    found = all_blocks()
    if argv[0] == "list":
        for path, name, _ in copies():
            print(f"{name}\t{KINDS.get(name, '?')}\t{path.relative_to(ROOT)}")
        return 0
    if argv[0] == "set":
        name, path = argv[1], argv[2]
        write_block(name, Path(path).read_text())
        return 0
    if argv[0] == "snapshot":
        shot = snapshot(argv[1])
        if shot is None:
            print(f"campaign {argv[1]}: no point reported its rate while it ran", file=sys.stderr)
            return 1
        print(shot, end="")
        return 0
    if argv[0] == "refresh":
        names = argv[1:] or [n for n, k in KINDS.items() if k == "exact"] + ["sleep-harvest"]
        for name in names:
            body = sleep_harvest() if name == "sleep-harvest" else run_exact(found[name])
            write_block(name, body)
            print(f"refreshed {name}", file=sys.stderr)
        return 0
    print(f"unknown command {argv[0]!r}; see --help", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
