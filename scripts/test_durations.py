"""test_durations.py JUNIT.xml [--top N] - what a whole run of the suite spent per test module
and per test, from the JUnit XML that ``pytest --junitxml`` writes.

    python scripts/test_durations.py run.xml --write     # tests/durations.json: the workers' order
                                                         # (each test of a second or more, by its id)
    python scripts/test_durations.py run.xml --top 25    # the slowest modules and tests, and the total

tests/conftest.py orders the suite's groups by tests/durations.json (longest first), so that
pytest-xdist's two workers finish together; write it again when a test's cost moves."""

from __future__ import annotations

import argparse
import json
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

DURATIONS = Path(__file__).resolve().parents[1] / "tests" / "durations.json"


KEEP_S = 1.0  # tests faster than this are left out of the file (tests/conftest.py counts them as FAST_S)


def module_of(classname: str) -> str:
    """``tests.test_x`` or ``tests.test_x.TestClass`` -> ``tests/test_x.py``."""
    parts = classname.split(".")
    while parts and not parts[-1].startswith("test_"):
        parts.pop()  # a class name
    return "/".join(parts) + ".py"


def nodeid_of(classname: str, name: str) -> str:
    """pytest's id of a JUnit test case: ``tests/test_x.py[::Class]::name``."""
    module = module_of(classname)
    cls = classname.split(".")[len(module[:-3].split("/")):]
    return "::".join([module, *cls, name])


def durations(junit: Path) -> tuple[dict[str, float], list[tuple[float, str]]]:
    """(seconds per module, [(seconds, test id)]) of one run; each test's time is its setup,
    call and teardown together (pytest's junit_duration_report=total)."""
    per_module: dict[str, float] = defaultdict(float)
    tests = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        classname = case.get("classname", "")
        seconds = float(case.get("time", 0.0))
        per_module[module_of(classname)] += seconds
        tests.append((seconds, nodeid_of(classname, case.get("name", ""))))
    return dict(per_module), sorted(tests, reverse=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("junit", type=Path)
    ap.add_argument("--write", action="store_true", help=f"write {DURATIONS.relative_to(DURATIONS.parents[1])}")
    ap.add_argument("--top", type=int, default=25, help="how many modules and tests to list (default 25)")
    args = ap.parse_args(argv)
    if not args.junit.is_file():
        print(f"error: {args.junit}: no such file (pytest --junitxml=FILE writes one)", file=sys.stderr)
        return 2
    per_module, tests = durations(args.junit)
    if args.write:
        kept = {test: round(s, 1) for s, test in sorted(tests, key=lambda st: st[1]) if s >= KEEP_S}
        DURATIONS.write_text(json.dumps(kept, indent=0) + "\n")
    print(f"{len(tests)} tests, {sum(per_module.values()):.0f} s of test time in {len(per_module)} modules")
    for module, seconds in sorted(per_module.items(), key=lambda kv: -kv[1])[:args.top]:
        print(f"{seconds:8.1f} s  {module}")
    print()
    for seconds, test in tests[:args.top]:
        print(f"{seconds:8.1f} s  {test}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
