"""What the benchmarks share: side-by-side measurement and how a ratio is printed.

Every benchmark measures its variants in one run, interleaved A B B A A B ... (the
order flips each round, so a neighbour's load or a slow drift of this shared machine
hits both variants alike), and prints the ratio of the two: the median of the
per-round ratios, with their spread. Absolute times are printed beside it for
context; only the ratio is meant to be compared between machines.
"""

from __future__ import annotations

import os
import statistics
import sys
from pathlib import Path
from typing import Callable, Mapping, Sequence

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # `python benchmarks/x.py` from a checkout that is not installed
    sys.path.insert(0, str(REPO))


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without inherited SLURM_/SBATCH_/CAMPAIGN_ settings, plus
    ``extra``; ``SLURM_CONF`` stays: it names the cluster every client asks (a second local
    cluster's), and the benchmark's own scancel asks the same one."""
    env = {k: v for k, v in os.environ.items()
           if k == "SLURM_CONF" or not k.startswith(("SLURM_", "SBATCH_", "CAMPAIGN_"))}
    env.update(extra)
    return env


def interleaved(variants: Mapping[str, Callable[[int], object]], rounds: int) -> dict[str, list[object]]:
    """Run each variant once per round, the order reversed every other round
    (A B, B A, A B, ...); returns each variant's results in round order.
    Each callable gets the round number."""
    names = list(variants)
    out: dict[str, list[object]] = {n: [] for n in names}
    for r in range(rounds):
        for name in names if r % 2 == 0 else reversed(names):
            out[name].append(variants[name](r))
    return out


def ratio_line(what: str, num: Sequence[float], den: Sequence[float], *, unit: str = "s") -> str:
    """``what: 4.21x (median of 3 paired rounds, range 3.9-4.5; 8.40 s vs 2.00 s)``: the
    per-round ratios num/den, their median and range, and the two medians."""
    pairs = [a / b for a, b in zip(num, den) if b > 0]
    if not pairs:
        return f"{what}: n/a (no valid round)"
    med = statistics.median(pairs)
    spread = f", range {min(pairs):.2f}-{max(pairs):.2f}" if len(pairs) > 1 else ""
    return (f"{what}: {med:.2f}x (median of {len(pairs)} paired round(s){spread}; "
            f"{fmt(statistics.median(num), unit)} vs {fmt(statistics.median(den), unit)})")


def fmt(value: float, unit: str = "s") -> str:
    if unit == "s":
        return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"
    return f"{value:,.0f} {unit}"


def parse_sizes(text: str) -> list[int]:
    """``"10,100,1000"`` -> [10, 100, 1000]; refuses anything but positive integers."""
    try:
        sizes = [int(s.replace("_", "")) for s in text.split(",") if s.strip()]
    except ValueError:
        raise SystemExit(f"error: --sizes {text!r}: expected positive integers separated by commas, e.g. 10,100,1000")
    if not sizes or min(sizes) <= 0:
        raise SystemExit(f"error: --sizes {text!r}: expected positive integers separated by commas, e.g. 10,100,1000")
    return sizes


# ---------------------------------------------------------------- saved outputs (--save)

RESULTS = REPO / "benchmarks" / "results"  # what benchmarks/report.py turns into the README's table


def load_average() -> list[float]:
    """The machine's 1, 5 and 15 minute load averages (empty where unknown)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:  # pragma: no cover - not Unix
        return []


def machine() -> str:
    """One line naming this machine: CPU model, cores, OS (what a figure was measured on)."""
    import platform

    model = ""
    try:
        with open("/proc/cpuinfo") as fh:
            model = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), "")
    except OSError:
        pass
    return f"{model or platform.processor() or platform.machine()}, {os.cpu_count()} cores, {platform.system()}"


def figure(key: str, what: str, runs: Sequence[float], *, unit: str = "", goal: str = "",
           met: bool | None = None, note: str = "") -> dict:
    """One figure of a benchmark's saved output: its value in every run (``runs``), with
    min/median/max; ``goal`` and ``met`` where the figure has one."""
    vals = [float(v) for v in runs]
    return {"key": key, "what": what, "unit": unit, "runs": vals,
            "min": min(vals) if vals else None, "median": statistics.median(vals) if vals else None,
            "max": max(vals) if vals else None, "goal": goal, "met": met, "note": note}


def save(name: str, *, command: str, figures: Sequence[dict], load_start: Sequence[float], text: str = "",
         folder: Path | None = None) -> Path:
    """Write ``<folder>/<name>.json`` (default benchmarks/results/): the command, the
    machine, the date, the load averages at start and end, the figures and the printed
    text. benchmarks/report.py reads these files and nothing else."""
    import datetime
    import json

    out = Path(folder or RESULTS)
    out.mkdir(parents=True, exist_ok=True)
    doc = {"benchmark": name, "command": command, "machine": machine(),
           "date": datetime.date.today().isoformat(), "load_start": list(load_start), "load_end": load_average(),
           "figures": list(figures), "output": text}
    path = out / f"{name}.json"
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path


def median_ci(values: Sequence[float]) -> tuple[float, float]:
    """Distribution-free ~95% confidence interval of the median (order statistics
    n/2 -+ 1.96 sqrt(n)/2): how far the noise of this machine leaves the figure open."""
    import math

    xs = sorted(values)
    n = len(xs)
    half = 1.96 * math.sqrt(n) / 2
    return xs[max(int(math.floor(n / 2 - half)), 0)], xs[min(int(math.ceil(n / 2 + half)), n - 1)]


def trimmed_mean_ci(values: Sequence[float], trim: float = 0.2, level: float = 0.95) -> tuple[float, float, float]:
    """(estimate, low, high): the ``trim`` trimmed mean of ``values`` with its Tukey-McLaughlin
    interval (the Winsorized standard error over (1 - 2 trim), t with n - 2g - 1 degrees
    of freedom). Robust to the load spikes of a shared machine (a spike that hits one
    block is trimmed away) at nearly the mean's efficiency: a narrower interval than the
    median's for the same pairs."""
    from campaign_window import t_quantile

    xs = sorted(float(v) for v in values)
    n = len(xs)
    if n < 3:
        m = statistics.fmean(xs) if xs else float("nan")
        return m, float("-inf"), float("inf")
    g = int(trim * n)
    kept = xs[g:n - g]
    est = statistics.fmean(kept)
    wins = [xs[g]] * g + kept + [xs[n - g - 1]] * g
    se = statistics.stdev(wins) / ((1 - 2 * g / n) * n ** 0.5)
    t = t_quantile(max(n - 2 * g - 1, 1), level)
    return est, est - t * se, est + t * se


def ratio_figure(key: str, what: str, num: Sequence[float], den: Sequence[float], **kw) -> dict:
    """A saved figure of per-round ratios num/den (what ``ratio_line`` prints the median of)."""
    return figure(key, what, [a / b for a, b in zip(num, den) if b > 0], unit="x", **kw)


def save_arg(ap) -> None:
    """The ``--save`` option every benchmark shares."""
    ap.add_argument("--save", action="store_true",
                    help="write what this run measured to benchmarks/results/ (benchmarks/report.py reads it)")


def command_line(script: str, argv) -> str:
    """How this run was invoked, as the README's table shows it (a store URL's password as ``***``)."""
    from campaign.common.redact import redact

    return redact(" ".join(["python", f"benchmarks/{script}", *(argv if argv is not None else sys.argv[1:])]))
