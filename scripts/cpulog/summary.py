"""summary.py LOG: the CPU seconds scripts/cpulog/sitecustomize.py logged, by test module and
by kind of process (job ranks, campaign commands, pytest and the rest)."""

import collections
import json
import sys


def kind(argv: list) -> str:
    text = " ".join(argv)
    if "_submit" in text:
        return "job"
    if "__main__" in text or "campaign" in text.split(" ")[0]:
        return "command"
    return "pytest" if "pytest" in text or text.startswith("-c") else "other"


def main(path: str) -> None:
    rows = [json.loads(line) for line in open(path)]
    by_module: collections.Counter = collections.Counter()
    by_kind: collections.Counter = collections.Counter()
    for r in rows:
        by_module[r["test"].split("::")[0] or "(outside a test: pytest itself, in-process tests)"] += r["cpu"]
        by_kind[kind(r["argv"])] += r["cpu"]
    print(f"{sum(by_module.values()):.1f} CPU-s in {len(rows)} Python processes: "
          + ", ".join(f"{k} {v:.1f}" for k, v in by_kind.most_common()))
    for name, cpu in by_module.most_common(40):
        print(f"{cpu:8.1f}  {name}")


if __name__ == "__main__":
    main(sys.argv[1])
