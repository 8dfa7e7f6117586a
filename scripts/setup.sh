#!/usr/bin/env bash
# setup.sh [EXTRAS] - make .venv and install campaign with the pinned stack
# (constraints.txt, the one place versions are pinned). EXTRAS defaults to "train";
# the tests use "train,test". Re-running is a no-op until constraints.txt or
# pyproject.toml change.
#
# The install is editable (-e): setuptools' editable finder maps campaign's packages to
# this checkout. Hydra finds the launcher plugin (hydra/launcher=campaign) by scanning
# the hydra_plugins namespace with pkgutil, which sees only plain folders: pyproject.toml
# therefore lists "hydra_plugins" itself as a package, and the finder then puts
# ./hydra_plugins on the namespace's path, for every Hydra app in this environment. An
# environment installed before that (or with another tool) is checked below.
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
# Hydra must see the plugin from any app, not only campaign's (an environment installed
# before pyproject.toml listed hydra_plugins does not): reinstall once if it does not.
if ! .venv/bin/python -c "from campaign.launch.main import check_plugin_visible; check_plugin_visible()" 2>/dev/null; then
  if [[ -n ${CAMPAIGN_SETUP_AGAIN:-} ]]; then
    echo "[setup] Hydra still cannot see hydra_plugins/campaign_launcher after a reinstall" >&2
    exit 1
  fi
  echo "[setup] reinstalling campaign so that Hydra's plugin scan sees hydra_plugins/campaign_launcher"
  rm -f "$stamp"
  CAMPAIGN_SETUP_AGAIN=1 exec bash "$0" "$@"
fi
# The C++ DDP comm hook (trainers/comm_cpp.py): built once per torch (~45 s on 2 cores)
# so that no job waits for the compiler. Not fatal: without it, jobs time the all-reduce
# with the Python hook and say why (rank_timing.extra.comm_hook_fallback).
if [[ $EXTRAS == *train* ]] && ! .venv/bin/python -m trainers.comm_cpp >/dev/null 2>&1; then
  echo "[setup] building the C++ comm hook (trainers/comm_cpp.py)"
  .venv/bin/python -m trainers.comm_cpp --build >/dev/null \
    || echo "[setup] the C++ comm hook did not build: jobs will time the all-reduce with the Python hook"
fi
# DeepSpeed's CPU communication op (deepspeed_shm_comm): DeepSpeed JIT-builds it when a job first
# starts its engine on a CPU (~75 s of compiler CPU on 2 cores, inside that job's start-up). Built
# here once instead, into the cache this environment's jobs read (TORCH_EXTENSIONS_DIR, else
# torch's own under ~/.cache). Not fatal: without it, the first DeepSpeed job on a CPU builds it.
ext=${TORCH_EXTENSIONS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/torch_extensions/py*}
if [[ $EXTRAS == *deepspeed* ]] && ! compgen -G "$ext/deepspeed_shm_comm/deepspeed_shm_comm*.so" >/dev/null; then
  echo "[setup] building DeepSpeed's CPU communication op (deepspeed_shm_comm)"
  .venv/bin/python -c "from deepspeed.accelerator import get_accelerator as a; b = a().create_op_builder('ShareMemCommBuilder'); b and b.load()" \
    >/dev/null 2>&1 || echo "[setup] deepspeed_shm_comm did not build: the first DeepSpeed job on a CPU builds it"
fi
# Optional system package: Debian's chromium, the headless browser tests/test_report_page.py
# opens `campaign report`'s page in (that test skips, saying why, without it). Best effort:
# only as root with apt-get, never fatal; CAMPAIGN_NO_BROWSER=1 skips it.
if [[ -z ${CAMPAIGN_NO_BROWSER:-} ]] && ! command -v chromium >/dev/null && [[ $(id -u) == 0 ]] \
    && command -v apt-get >/dev/null; then
  echo "[setup] installing chromium (optional: the report page's browser test)"
  apt_log=$(mktemp "${TMPDIR:-/tmp}/setup-chromium.XXXXXX.log")
  { apt-get install -y -q --no-install-recommends chromium >"$apt_log" 2>&1 \
      || { apt-get update -q >>"$apt_log" 2>&1 && apt-get install -y -q --no-install-recommends chromium >>"$apt_log" 2>&1; }; } \
    || echo "[setup] chromium not installed (log: $apt_log); the browser test will skip"
fi
