#!/usr/bin/env bash
# docs.sh [serve|build] - the manual (docs/, mkdocs.yml) as a site, offline: installs what it
# needs into .venv (the docs extra: MkDocs and Material, once), then serves it on
# http://127.0.0.1:8000 (serve, the default) or writes it to site/ (build), which opens
# from the file system too (site/index.html: the offline plugin, no server needed).
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-serve}
[[ $what == serve || $what == build ]] || { echo "usage: bash scripts/docs.sh [serve|build]" >&2; exit 2; }
if ! .venv/bin/python -c "import mkdocs, material" 2>/dev/null; then
  [[ -x .venv/bin/python ]] || python3 -m venv .venv
  echo "[docs] installing the docs extra (MkDocs, Material) into .venv"
  .venv/bin/python -m pip install -q --disable-pip-version-check -c constraints.txt -e ".[docs]"
fi
# Material's end-of-life notice (May 2027) is said once in docs/contributing.md, not at every build
export NO_MKDOCS_2_WARNING=1
if [[ $what == build ]]; then
  exec .venv/bin/python -m mkdocs build --strict
fi
exec .venv/bin/python -m mkdocs serve --dev-addr 127.0.0.1:8000
