"""What scripts/gpu-check.sh runs: the checks that need a GPU, summed up on one screen.

1. the ``gpu`` tests (tests/test_gpu.py);
2. one 1-GPU point of the reference workload, SwinV2-B + UPerNet at 512x512, 8 images,
   bf16, synthetic data, as a sampled projection run with a profiler window
   (``platform=local_gpu``), harvested;
3. benchmarks/overhead.py --device cuda (what the instrumentation costs a step);
4. benchmarks/trainer_vs_plain.py --device cuda (the campaign's trainer vs a plain loop).

Then one screen: s/iter, images/s, MFU (against the math in use), GPU utilisation of
the profiler window, peak memory of the timed window and of the warm-up, the
overhead and trainer-vs-plain ratios, and where the logs and traces are. Without a
GPU it says so in one line and exits 3; exit 1 if a check failed, 0 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
EXIT_NO_GPU = 3
POINT = ["platform=local_gpu", "gpus=1", "trainer=swinv2_upernet", "trainer.params.variant=base",
         "trainer.precision=bf16", "dataset=ade20k", "dataset.name=synthetic", "dataset.image_size=512",
         "experiment=projection", "experiment.images_per_gpu=8", "experiment.warmup_iterations=10",
         "experiment.sample_iterations=40", "experiment.profile_iterations=3"]


def no_gpu_reason(python: str) -> str | None:
    """Why torch sees no CUDA device here, or None if it sees one."""
    code = ("import torch, sys\n"
            "if torch.cuda.is_available(): sys.exit(0)\n"
            "print('torch %s (CUDA %s) sees no CUDA device' % (torch.__version__, torch.version.cuda))\n"
            "sys.exit(1)\n")
    try:
        done = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot run {python}: {exc}"
    if done.returncode == 0:
        return None
    why = (done.stdout.strip() or done.stderr.strip().splitlines()[-1:] or ["torch failed"])
    why = why if isinstance(why, str) else why[0]
    if shutil.which("nvidia-smi") is None:
        why += "; nvidia-smi is not installed"
    return why


def _run(cmd: list[str], log: Path, env: dict | None = None, timeout: float = 3600) -> tuple[int, str]:
    """Run ``cmd`` from the repository, its output to ``log`` too; (exit status, output)."""
    print(f"[gpu-check] {' '.join(cmd[1:] if cmd[0] == sys.executable else cmd)}  (log: {log})", flush=True)
    t0 = time.time()
    try:
        done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
        out, rc = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired as exc:
        out, rc = f"{exc}", 124
    log.write_text(out)
    print(f"[gpu-check]   exit {rc} after {time.time() - t0:.0f} s", flush=True)
    return rc, out


def _last(pattern: str, text: str) -> str | None:
    found = re.findall(pattern, text)
    return found[-1] if found else None


def _fmt(value, spec: str = ".3f", unit: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{unit}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", default=sys.executable, help="the Python with campaign and torch installed")
    ap.add_argument("--out", default=None, help="folder for logs, the point's results and traces (default: a new temp folder)")
    ap.add_argument("--skip-tests", action="store_true", help="leave out the gpu tests")
    args = ap.parse_args(argv)
    py = args.python
    why = no_gpu_reason(py)
    if why:
        print(f"gpu-check: no GPU to check ({why}); run it on a machine with an NVIDIA GPU")
        return EXIT_NO_GPU
    out = Path(args.out or tempfile.mkdtemp(prefix="gpu-check-")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "CAMPAIGN_"))}
    env.update(CAMPAIGN_RESULTS=str(out / "results"), PYTHONUNBUFFERED="1")
    failed = []

    tests = "skipped"
    if not args.skip_tests:
        rc, text = _run([py, "-m", "pytest", "-m", "gpu", "tests/test_gpu.py", "-q", "-p", "no:cacheprovider"],
                        out / "gpu-tests.log", env)
        tests = _last(r"=+ (.*?) in [\d.]+s", text) or f"exit {rc}"
        if rc != 0:
            failed.append("gpu tests")

    rc, text = _run([py, "-m", "campaign.launch", *POINT], out / "point.log", env)
    if rc != 0:
        failed.append("projection point")
    tables = {}
    rc, text = _run([py, "-m", "campaign", "harvest", "--table", "all", "--to", "json", "--out", str(out / "tables")],
                    out / "harvest.log", env)
    if rc == 0:
        tables = {p.stem: json.loads(p.read_text()) for p in (out / "tables").glob("*.json")}
    else:
        failed.append("harvest")

    rc, over = _run([py, "benchmarks/overhead.py", "--device", "cuda", "--ranks", "1", "--pairs", "30", "--steps", "5"],
                    out / "overhead.log", env)
    if rc != 0:
        failed.append("overhead benchmark")
    rc, vs = _run([py, "benchmarks/trainer_vs_plain.py", "--device", "cuda", "--variant", "base", "--image-size", "512",
                   "--batch", "8", "--precision", "bf16", "--pairs", "4", "--steps", "3", "--warmup", "3"],
                  out / "trainer-vs-plain.log", env)
    if rc != 0:
        failed.append("trainer-vs-plain benchmark")

    print(summary(tables, tests, over, vs, out))
    if failed:
        print(f"gpu-check: FAILED: {', '.join(failed)} (logs in {out})")
        return 1
    return 0


def summary(tables: dict, tests: str, over: str, vs: str, out: Path) -> str:
    """The one screen (module docstring) from the harvested tables and the benchmarks' lines."""
    thr = (tables.get("throughput") or [{}])[0]
    hw = (tables.get("hardware") or [{}])[0]
    util = (tables.get("utilisation") or [{}])[0]
    wait = next((r for r in tables.get("breakdown") or [] if r.get("phase") == "data wait"), {})
    ratio = _last(r"instrumented/bare step time: ([\d.]+ \([^;]*; 95% CI (?:over the sets )?[\d.]+-[\d.]+)", over)
    accounted = _last(r"accounted: ([\d.]+ us/step = [\d.]+% of the bare step)", over)
    trainer = _last(r"trainer/plain step time: ([\d.]+ \(median[^;]*; 95% CI [\d.]+-[\d.]+)", vs)
    steps = _last(r"(plain [\d.]+ ms/step, trainer [\d.]+ ms/step)", vs)
    phases = _last(r"trainer phases: (.*) of its step", vs)
    lines = [
        "",
        "gpu-check: 1 GPU, SwinV2-B + UPerNet 512x512, 8 images, bf16 (synthetic data, sampled projection run)",
        f"  gpu tests                  {tests}",
        f"  s/iter                     {_fmt(thr.get('iter_s'), '.4f')}",
        f"  images/s                   {_fmt(thr.get('images_per_s'), '.1f')}",
        f"  MFU                        {_fmt(hw.get('mfu'), '.3f')}  ({_fmt(hw.get('achieved_tflops'), '.1f')} of "
        f"{_fmt(hw.get('peak_tflops'), '.1f')} TFLOP/s, math {hw.get('math') or '-'})",
        f"  GPU utilisation (profiler) {_fmt(util.get('gpu_util'), '.3f')}  (busy / window; "
        f"CPU {_fmt(util.get('cpu_util'), '.2f')})",
        f"  peak memory                window {_fmt(hw.get('peak_memory_gb'), '.2f', ' GB')}, "
        f"warm-up {_fmt(hw.get('warmup_peak_memory_gb'), '.2f', ' GB')}",
        f"  data wait                  {_fmt((wait.get('share') or 0) * 100 if wait else None, '.2f', '%')} of the step",
        f"  instrumentation overhead   {ratio or '-'}; accounted {accounted or '-'}",
        f"  trainer vs plain loop      {trainer or '-'}; {steps or '-'}",
        f"  trainer phases             {phases or '-'}",
        f"  note                       {hw.get('note') or util.get('note') or '-'}",
        f"  traces                     {util.get('trace_files') or '-'}",
        f"  logs                       {out}",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
