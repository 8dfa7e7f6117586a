"""Campaign's launcher vs Hydra's stock submitit launcher: one sweep, the real local SLURM.

Both run the same Hydra sweep over the same config groups,

    platform=<P platforms> gpus=<G counts> seed=range(0,S) experiment=smoke    (P x G x S = N points)

once through ``python -m campaign.launch -m`` (our sweeper + launcher) and once through
Hydra's ``hydra/launcher=submitit_slurm hydra/sweeper=basic`` (hydra-submitit-launcher),
interleaved A B, B A, ... in one run, and prints per size N:

    N=100  hydra/campaign time to first sbatch: 2.10x (...)
    N=100  hydra/campaign time to return:       9.80x (...)

What each number includes (from the launcher process's start, so Python, Hydra and
plugin start-up are in both):

- time to first sbatch: until the first ``sbatch`` starts. Campaign composes each
  config-group combination once, validates and resolves every point, registers the
  campaign and its points in a fresh SQLite store, then submits; Hydra's basic sweeper
  composes every point once to check it, its launcher pickles one job per point.
  Measured by a shim ``sbatch`` first on PATH that records the time and runs the real one.
- time to return: until the launcher process exits. Campaign returns once every array
  is submitted (one sbatch per resource group: platform x GPU count here) and the store
  updated; its jobs are submitted ``--hold`` (``platform.extra_sbatch=[--hold]``) and
  cancelled right after, so they never run and never load this machine. Hydra's
  launcher blocks until every job has ended, so its return time always includes
  waiting for jobs:
    --hydra-jobs run     its jobs run, with a trivial task function (this file's tiny
                         Hydra app: the project's config groups, a task that returns at
                         once), so the figure is submission + SLURM scheduling N array
                         tasks + N Python start-ups and config compositions on this
                         2-core machine + submitit's polling (every 1-60 s);
    --hydra-jobs cancel  its jobs are submitted --hold and cancelled as soon as the shim
                         has seen the sbatch: the figure is submission + the time
                         submitit takes to notice that the jobs ended (its sacct poll)
                         and the launcher to raise. A lower bound of what it costs.
    auto (default)       run up to 100 points, cancel above (1,000 trivial jobs take
                         over ten minutes here).
  Hydra submits the whole sweep as one array with one resource set
  (``hydra.launcher.*``: partition v100, 1 CPU, no GPU): it cannot give each point its
  platform's partition and GPUs, which is why campaign submits one array per group.

Cancelling: every job id the shim saw is scancelled (by id, nobody else's jobs) after
each run and again at exit.

    .venv/bin/python benchmarks/launch.py                        # N=10, 2 rounds: ~20 s
    .venv/bin/python benchmarks/launch.py --sizes 10,100,1000    # the full figure (~10 min here)
    .venv/bin/python benchmarks/launch.py --sizes 100 --rounds 4 --hydra-jobs cancel
    .venv/bin/python benchmarks/launch.py --variant floor --sizes 1000,10000   # campaign / its floor

``--variant floor`` measures campaign's launch against the same sbatch calls issued
directly from a shell loop (benchmarks/launch_floor.py; issue 26).

Needs the local SLURM (``bash scripts/local-slurm.sh status``) and hydra-submitit-launcher.
"""

from __future__ import annotations

import argparse
import re
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _common import (REPO, clean_env, command_line, interleaved, load_average, parse_sizes, ratio_figure,
                         ratio_line, save, save_arg)
else:  # imported as benchmarks.launch (the smoke test)
    from benchmarks._common import (REPO, clean_env, command_line, interleaved, load_average, parse_sizes, ratio_figure,
                                    ratio_line, save, save_arg)

PLATFORMS = ("v100", "a100", "a100_nvlink_40", "a100_nvlink_80")  # all single-node on the test cluster
GPU_COUNTS = (1, 2, 4)  # every platform holds 4 GPUs on one node
HYDRA_APP_FLAG = "--hydra-app"
JOB_NAME = "campaign-bench-launch"
RUN_LIMIT = 100  # --hydra-jobs auto: run Hydra's jobs up to this many points


# ---------------------------------------------------------------- the sweep

def sweep(n: int) -> list[str]:
    """Sweep overrides of exactly ``n`` valid points: the most platform x GPU-count
    combinations that divide ``n`` (more resource groups: more arrays for campaign),
    times ``seed=range(0, n / combinations)``."""
    best = max(((p, g) for p in range(1, len(PLATFORMS) + 1) for g in range(1, len(GPU_COUNTS) + 1)
                if n % (p * g) == 0), key=lambda pg: (pg[0] * pg[1], pg[0]))
    p, g = best
    return [f"platform={','.join(PLATFORMS[:p])}", f"gpus={','.join(str(x) for x in GPU_COUNTS[:g])}",
            f"seed=range(0,{n // (p * g)})", "experiment=smoke"]


# ---------------------------------------------------------------- the sbatch shim

SHIM = """#!/bin/bash
# benchmarks/launch.py: record when each sbatch starts and ends, then hand its answer on.
start=$EPOCHREALTIME
{copy}out=$({real} "$@")
rc=$?
end=$EPOCHREALTIME
array=-
while IFS= read -r line; do
  case $line in "#SBATCH --array="*) array=${{line#\\#SBATCH --array=}}; break;; esac
done < "${{!#}}"
printf '%s %s %s %s %s\\n' "$start" "$end" "$rc" "$array" "${{out//$'\\n'/ }}" >> {log}
[ -n "$out" ] && printf '%s\\n' "$out"
exit $rc
"""


# --variant floor: each call's script (its last argument) and its other arguments kept as
# <scripts>/<start>.sh and <start>.sh.args, before sbatch runs (submitit renames or deletes
# the script once sbatch answers), to be submitted again by a plain shell loop.
COPY = """copy={scripts}/$start.sh
cp -- "${{!#}}" "$copy"
: > "$copy.args"
[ $# -gt 1 ] && printf '%q ' "${{@:1:$#-1}}" > "$copy.args"
"""


def write_shim(folder: Path, real_sbatch: str, log: Path, scripts: Path | None = None) -> Path:
    """An ``sbatch`` in ``folder`` that appends ``start end rc array stdout`` to ``log``
    (and, with ``scripts``, keeps each call's script and arguments there: ``COPY``)."""
    folder.mkdir(parents=True, exist_ok=True)
    shim = folder / "sbatch"
    copy = ""
    if scripts is not None:
        scripts.mkdir(parents=True, exist_ok=True)
        copy = COPY.format(scripts=shlex.quote(str(scripts)))
    shim.write_text(SHIM.format(real=shlex.quote(real_sbatch), log=shlex.quote(str(log)), copy=copy))
    shim.chmod(0o755)
    return shim


@dataclass
class Sbatch:
    start: float
    end: float
    rc: int
    array: str  # "0-99%256" or "-"
    job_id: str | None
    key: str = ""  # the start time as the shim wrote it: its copy of the script is <scripts>/<key>.sh

    @property
    def tasks(self) -> int:
        m = re.match(r"(\d+)-(\d+)", self.array)
        return int(m.group(2)) - int(m.group(1)) + 1 if m else 1


def read_shim_log(log: Path) -> list[Sbatch]:
    out = []
    if not log.exists():
        return out
    for line in log.read_text().splitlines():
        start, end, rc, array, *rest = line.split(" ")
        m = re.search(r"Submitted batch job (\d+)", " ".join(rest))
        out.append(Sbatch(float(start), float(end), int(rc), array, m.group(1) if m else None, start))
    return out


def scancel(job_ids: list[str]) -> None:
    """Cancel these jobs (by id: never anyone else's)."""
    if job_ids:
        subprocess.run(["scancel", *job_ids], capture_output=True, timeout=60, check=False)


# ---------------------------------------------------------------- one run of one launcher

@dataclass
class Run:
    launcher: str
    points: int
    first_sbatch_s: float
    return_s: float
    sbatches: list[Sbatch] = field(default_factory=list)
    returncode: int = 0
    output: str = ""
    folder: Path | None = None  # the run's own folder (its shim's log, kept scripts, store)
    cpu_s: float = 0.0  # CPU the launcher process and what it waited for used (its sbatch calls included)

    @property
    def tasks(self) -> int:
        return sum(s.tasks for s in self.sbatches if s.rc == 0)


def command(launcher: str, n: int, folder: Path, hydra_jobs: str) -> list[str]:
    if launcher == "campaign":
        return [sys.executable, "-m", "campaign.launch", "-m", *sweep(n), "platform.cpus_per_task=1",
                "platform.compute_capability=null",  # the test cluster's GPUs are emulated: not checked
                "platform.extra_sbatch=[--hold]", f"name={JOB_NAME}"]
    argv = [sys.executable, str(Path(__file__).resolve()), HYDRA_APP_FLAG, "-m", *sweep(n),
            "hydra/launcher=submitit_slurm", "hydra/sweeper=basic", f"hydra.sweep.dir={folder}/hydra",
            "hydra.launcher.partition=v100", "hydra.launcher.cpus_per_task=1", "hydra.launcher.timeout_min=15",
            f"hydra.launcher.name={JOB_NAME}", "hydra.launcher.array_parallelism=1000"]
    if hydra_jobs == "cancel":
        argv.append("+hydra.launcher.additional_parameters.hold=true")
    return argv


def run_once(launcher: str, n: int, work: Path, real_sbatch: str, hydra_jobs: str, seen: list[str],
             timeout: float, keep_scripts: bool = False) -> Run:
    """Launch the sweep of ``n`` points with ``launcher``, time it, cancel what it submitted
    (``keep_scripts``: each sbatch's script and arguments kept in ``<run folder>/scripts``)."""
    folder = Path(tempfile.mkdtemp(prefix=f"{launcher}-{n}-", dir=work))
    log = folder / "sbatch.log"
    shim_dir = write_shim(folder / "bin", real_sbatch, log, folder / "scripts" if keep_scripts else None).parent
    env = clean_env(CAMPAIGN_RESULTS=str(folder / "results"), HYDRA_FULL_ERROR="1")
    env["PATH"] = f"{shim_dir}:{env.get('PATH', '')}"
    cancel_early = launcher == "hydra" and hydra_jobs == "cancel"
    out = (folder / "output.txt").open("w+")
    cpu0 = _children_cpu()
    t0 = time.time()
    proc = subprocess.Popen(command(launcher, n, folder, hydra_jobs), cwd=folder, env=env, stdout=out,
                            stderr=subprocess.STDOUT, text=True)
    cancelled: set[str] = set()
    try:
        while True:
            try:
                proc.wait(timeout=0.05)
                break
            except subprocess.TimeoutExpired:
                if time.time() - t0 > timeout:
                    proc.kill()
                    raise SystemExit(f"error: {launcher} launcher took over {timeout:.0f} s for {n} points; "
                                     f"see {folder / 'output.txt'}")
                if cancel_early:
                    ids = [s.job_id for s in read_shim_log(log) if s.job_id and s.job_id not in cancelled]
                    scancel(ids)
                    cancelled.update(ids)
        t_ret = time.time()
        cpu = _children_cpu() - cpu0
    finally:
        sbatches = read_shim_log(log)
        ids = [s.job_id for s in sbatches if s.job_id]
        seen.extend(ids)
        scancel([i for i in ids if i not in cancelled])
    out.seek(0)
    text = out.read()
    out.close()
    if not sbatches:
        raise SystemExit(f"error: the {launcher} launcher ran no sbatch (exit {proc.returncode}):\n{text[-3000:]}")
    if launcher == "campaign" or hydra_jobs == "run":
        if proc.returncode != 0:
            raise SystemExit(f"error: the {launcher} launcher failed (exit {proc.returncode}):\n{text[-3000:]}")
    return Run(launcher, n, min(s.start for s in sbatches) - t0, t_ret - t0, sbatches, proc.returncode, text,
               folder, cpu)


def _children_cpu() -> float:
    """CPU seconds (user + system) of this process's ended children and what they waited for."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


# ---------------------------------------------------------------- the Hydra app Hydra's launcher runs

def hydra_app() -> None:
    """The project's config groups with a task that returns at once (what Hydra's jobs run)."""
    from campaign.catalogue.config import register

    register()
    import hydra

    def trivial_task(cfg) -> int:  # pickled by value with the launcher: the job needs nothing of this file
        return int(cfg.gpus)

    hydra.main(version_base="1.3", config_path="pkg://campaign_conf", config_name="config")(trivial_task)()


# ---------------------------------------------------------------- main

def preflight(hydra: bool = True) -> str:
    """The real sbatch, or exit saying what is missing (``hydra``: and Hydra's launcher)."""
    real = shutil.which("sbatch")
    if real is None:
        raise SystemExit("error: sbatch not on PATH; start the local cluster: sudo bash scripts/local-slurm.sh start")
    status = subprocess.run(["bash", str(REPO / "scripts" / "local-slurm.sh"), "status"], capture_output=True, timeout=60)
    if status.returncode != 0:
        raise SystemExit("error: the local SLURM cluster does not answer (bash scripts/local-slurm.sh status)")
    if not hydra:
        return real
    try:
        import hydra_plugins.hydra_submitit_launcher  # noqa: F401
    except ImportError:
        raise SystemExit("error: hydra-submitit-launcher is not installed: .venv/bin/pip install -c constraints.txt "
                         "hydra-submitit-launcher") from None
    return real


def measure(n: int, rounds: int, hydra_jobs: str, work: Path, real: str, seen: list[str], timeout: float) -> dict:
    mode = hydra_jobs if hydra_jobs != "auto" else ("run" if n <= RUN_LIMIT else "cancel")
    runs = interleaved({
        "campaign": lambda r: run_once("campaign", n, work, real, mode, seen, timeout),
        "hydra": lambda r: run_once("hydra", n, work, real, mode, seen, timeout),
    }, rounds)
    return {"n": n, "mode": mode, **runs}


def report(res: dict) -> list[str]:
    n, c, h = res["n"], res["campaign"], res["hydra"]
    what = {"run": "its N trivial jobs run", "cancel": "its jobs cancelled at once"}[res["mode"]]
    lines = [
        f"N={n}  sweep: {' '.join(sweep(n))}",
        f"N={n}  campaign: {len(c[0].sbatches)} sbatch (one array per resource group), {c[0].tasks} array tasks; "
        f"hydra: {len(h[0].sbatches)} sbatch, {h[0].tasks} array tasks",
        "N={}  {}".format(n, ratio_line("hydra/campaign time to first sbatch", [r.first_sbatch_s for r in h],
                                        [r.first_sbatch_s for r in c])),
        "N={}  {}".format(n, ratio_line(f"hydra/campaign time to return ({what})", [r.return_s for r in h],
                                        [r.return_s for r in c])),
    ]
    return lines


def _floor_module():
    if __package__ in (None, ""):
        import launch_floor as lf
    else:
        from benchmarks import launch_floor as lf
    return lf


def floor_size(n: int, rounds: int, work: Path, real: str, seen: list[str], timeout: float) -> tuple[list[dict], dict]:
    """``--variant floor`` at ``n`` points: prints its lines, returns its figures and its runs."""
    lf = _floor_module()
    res = lf.measure(n, rounds, work, real, seen, timeout)
    for line in lf.report(res):
        print(line, flush=True)
    return lf.figures(res), res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 epilog="example: .venv/bin/python benchmarks/launch.py --sizes 10,100,1000",
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10", help="sweep sizes in points, e.g. 10,100,1000 (default: 10)")
    ap.add_argument("--variant", choices=("hydra", "floor"), default="hydra",
                    help="campaign against Hydra's submitit launcher (default), or against the floor: the same "
                    "sbatch scripts from a shell loop (benchmarks/launch_floor.py; --save: launch_floor.json)")
    ap.add_argument("--rounds", default="2", help="A/B rounds per size, or one count per size: 2,1 (default: 2)")
    ap.add_argument("--hydra-jobs", choices=("auto", "run", "cancel"), default="auto",
                    help=f"let Hydra's trivial jobs run, or cancel them at once (auto: run up to {RUN_LIMIT} points)")
    ap.add_argument("--timeout", type=float, default=1200, help="seconds one launcher run may take (default: 1200)")
    ap.add_argument("--keep", action="store_true", help="keep the work folder (logs, stores, sbatch scripts)")
    save_arg(ap)
    args = ap.parse_args(argv)
    sizes = parse_sizes(args.sizes)
    parts = args.rounds.split(",")
    if not all(r.strip().isdigit() and int(r) > 0 for r in parts) or len(parts) not in (1, len(sizes)):
        raise SystemExit(f"error: --rounds {args.rounds!r}: expected one positive count, or one per size "
                         f"({len(sizes)}), e.g. 2 or 2,1")
    rounds = [int(r) for r in parts] * (len(sizes) if len(parts) == 1 else 1)
    real = preflight(hydra=args.variant == "hydra")
    work = Path(tempfile.mkdtemp(prefix="campaign-bench-launch-"))
    seen: list[str] = []
    load0, figures, measured = load_average(), [], []
    try:
        for n, n_rounds in zip(sizes, rounds):
            if args.variant == "floor":
                got, res = floor_size(n, n_rounds, work, real, seen, args.timeout)
                figures += got
                measured.append(res)
                if len(measured) > 1:  # the launch's cost of a point past start-up: against the smallest size
                    lines, more = _floor_module().past_start_up(measured[0], res)
                    for line in lines:
                        print(line, flush=True)
                    figures += more
                continue
            res = measure(n, n_rounds, args.hydra_jobs, work, real, seen, args.timeout)
            for line in report(res):
                print(line, flush=True)
            h, c = res["hydra"], res["campaign"]
            what = {"run": "its N trivial jobs run", "cancel": "its jobs cancelled at once: a lower bound"}[res["mode"]]
            figures += [
                ratio_figure(f"{n}.first_sbatch", f"launch of {n:,} points: Hydra's submitit launcher / campaign, "
                             "time to first sbatch", [r.first_sbatch_s for r in h], [r.first_sbatch_s for r in c]),
                ratio_figure(f"{n}.return", f"launch of {n:,} points: time to return, Hydra / campaign ({what})",
                             [r.return_s for r in h], [r.return_s for r in c]),
            ]
        if args.save:
            print("saved:", save("launch" if args.variant == "hydra" else "launch_floor",
                                 command=command_line("launch.py", argv), figures=figures,
                                 load_start=load0), flush=True)
    finally:
        ids = sorted(set(seen), key=int)
        scancel(ids)
        print(f"scancelled every job this run submitted: {','.join(ids) or 'none'}")
        if args.keep:
            print(f"work folder kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == HYDRA_APP_FLAG:
        del sys.argv[1]
        hydra_app()
    else:
        sys.exit(main())
