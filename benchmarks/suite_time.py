"""``benchmarks/suite_time.py``: how long the test suite takes per lane on this machine
(issue 42's goals: the whole suite's tests within 20 minutes, the fast lane within 3).

Runs ``bash scripts/run-tests.sh [--fast] -q`` for each lane, one after the other, and
takes pytest's own time for the tests (its closing line: collection and the tests, after
the set-up and the services' start) and the command's wall time (set-up, the local SLURM
cluster and PostgreSQL started where they are not up, the tests, their stop):

    fast: 905 passed, 1 skipped, 596 deselected; tests 2.6 min, command 2.8 min
    full: 1,440 passed, 8 skipped; tests 19.1 min, command 19.6 min

    python benchmarks/suite_time.py --save                 # both lanes
    python benchmarks/suite_time.py --lanes fast           # the fast lane alone

A lane that fails is reported with its exit status and saves nothing."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    from _common import command_line, figure, load_average, save, save_arg
else:
    from benchmarks._common import command_line, figure, load_average, save, save_arg

REPO = Path(__file__).resolve().parents[1]
GOALS_MIN = {"fast": 3.0, "full": 20.0}
# pytest's closing line: "==== 1440 passed, 8 skipped, 3 warnings in 1146.21s (0:19:06) ===="
CLOSING = re.compile(r"^=*\s*(?P<counts>\d+ \w+(?:, \d+ \w+)*) in (?P<secs>[\d.]+)s\b", re.M)


def closing(output: str) -> tuple[dict[str, int], float] | None:
    """(counts by outcome, pytest's seconds) from a run's last closing line; None without one."""
    found = list(CLOSING.finditer(output))
    if not found:
        return None
    last = found[-1]
    counts = {word: int(n) for n, word in (part.split() for part in last["counts"].split(", "))}
    return counts, float(last["secs"])


def run_lane(lane: str) -> tuple[int, str, float]:
    """(exit status, output, wall seconds) of one lane of scripts/run-tests.sh."""
    argv = ["bash", str(REPO / "scripts" / "run-tests.sh"), *(["--fast"] if lane == "fast" else []), "-q"]
    start = time.monotonic()
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True)
    return done.returncode, done.stdout + done.stderr, time.monotonic() - start


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lanes", default="fast,full", help="comma-separated: fast, full (default both)")
    save_arg(ap)
    args = ap.parse_args(argv)
    lanes = [x.strip() for x in args.lanes.split(",") if x.strip()]
    if not lanes or any(x not in GOALS_MIN for x in lanes):
        print(f"error: --lanes takes fast and/or full, got {args.lanes!r}", file=sys.stderr)
        return 2
    load_start = load_average()
    figures, lines = [], []
    for lane in lanes:
        rc, output, wall = run_lane(lane)
        parsed = closing(output)
        if rc != 0 or parsed is None:
            print(output[-4000:], file=sys.stderr)
            print(f"error: the {lane} lane exited {rc}" + ("" if parsed else " with no closing line"), file=sys.stderr)
            return 1
        counts, secs = parsed
        goal = GOALS_MIN[lane]
        summary = ", ".join(f"{n:,} {word}" for word, n in counts.items())
        line = f"{lane}: {summary}; tests {secs / 60:.1f} min, command {wall / 60:.1f} min"
        print(line, flush=True)
        lines.append(line)
        figures += [
            figure(f"{lane}_tests_min", f"test suite, {lane} lane: pytest's time for its tests ({summary})",
                   [secs / 60], unit="min", goal=f"<= {goal:g} min", met=secs / 60 <= goal),
            figure(f"{lane}_command_min", f"test suite, {lane} lane: `scripts/run-tests.sh` from start to end "
                   "(set-up, services, tests)", [wall / 60], unit="min"),
        ]
    if args.save:
        save("suite_time", command=command_line("suite_time.py", argv), figures=figures, load_start=load_start,
             text="\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
