#!/usr/bin/env bash
# gpu-check.sh [--out DIR] [--skip-tests] - one command for a user with an NVIDIA GPU:
# runs the gpu tests, one 1-GPU SwinV2-B bf16 projection point (platform=local_gpu) and
# the overhead and trainer-vs-plain benchmarks on CUDA, then prints on one screen
# s/iter, images/s, MFU, GPU utilisation, peak memory (timed window and warm-up) and the
# two ratios (scripts/gpu_check.py; docs/gpu.md says what each number means).
# Exit status: 0 all ran, 1 a check failed, 3 no GPU visible to torch (one line says so).
set -euo pipefail
cd "$(dirname "$0")/.."
py=${CAMPAIGN_PYTHON:-.venv/bin/python}
[[ -x $py ]] || py=$(command -v python3)
exec "$py" scripts/gpu_check.py --python "$py" "$@"
