#!/usr/bin/env bash
# setup.sh [EXTRAS] - make .venv and install campaign with the pinned stack
# (constraints.txt, the one place versions are pinned). EXTRAS defaults to "train";
# the tests use "train,test". Re-running is a no-op until constraints.txt or
# pyproject.toml change.
set -euo pipefail
cd "$(dirname "$0")/.."
EXTRAS=${1:-train}
PY=${PYTHON:-python3}
# DeepSpeed (the optional engine) is an sdist: build it without compiling any op ahead
# (they are JIT-built where needed), so it installs on CPU-only hosts in seconds.
export DS_BUILD_OPS=${DS_BUILD_OPS:-0}
[[ -x .venv/bin/python ]] || "$PY" -m venv .venv
stamp=".venv/.installed-${EXTRAS//,/-}"
want=$(cat constraints.txt pyproject.toml | sha256sum | cut -c1-16)
if [[ $(cat "$stamp" 2>/dev/null) != "$want" ]]; then
  echo "[setup] installing campaign[$EXTRAS] into .venv (torch and its CUDA libraries: a few minutes, ~6 GB)"
  start=$(date +%s)
  .venv/bin/python -m pip install -q --disable-pip-version-check -c constraints.txt -e ".[$EXTRAS]" 2>&1 \
    | { grep -v "^WARNING: Location" || true; }
  echo "$want" >"$stamp"
  echo "[setup] done in $(( $(date +%s) - start )) s"
fi
