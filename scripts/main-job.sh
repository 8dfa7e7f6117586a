#!/usr/bin/env bash
# main-job.sh [--readme] [OVERRIDES...] - the README's first command: a small real
# weak-scaling campaign on this machine (platform=local: one CPU process per "GPU",
# gloo), end to end: launch (with its estimate), follow it (progress, ETA), harvest
# speedup and parallel efficiency, draw the figures. A couple of minutes on 2 cores.
#
# --readme: also write what it printed into the main-job blocks (README.md, docs/getting-started.md) and its
# speedup figure into docs/main-job-speedup.png and a screenshot of its report into docs/img/report.png
# (scripts/readme_blocks.py; the campaign
# then runs in a fresh results folder, so that its estimate is the one a first run gets).
set -euo pipefail
cd "$(dirname "$0")/.."
README=
if [[ ${1:-} == --readme ]]; then
  README=1
  shift
fi
[[ -n ${CAMPAIGN_NO_SETUP:-} ]] || bash scripts/setup.sh train
if [[ -n $README ]]; then
  CAMPAIGN_RESULTS=$(mktemp -d "${TMPDIR:-/tmp}/main-job.XXXXXX")
fi
export CAMPAIGN_RESULTS=${CAMPAIGN_RESULTS:-$PWD/results}
mkdir -p "$CAMPAIGN_RESULTS"
out="$CAMPAIGN_RESULTS/main-job-outputs"
mkdir -p "$out"
py=${MAIN_JOB_PYTHON:-.venv/bin/python}  # (tests/test_main_job_script.py: a stand-in that says what it ran)
campaign=("$py" -m campaign)
# each step's output under a heading of its own, each table printed once
heading() { printf '\n== %s ==\n' "$1"; }
# a heartbeat a second (default 10 s): its points are short, and campaign status shows their rate
# shellcheck disable=SC2054  # gpus=1,2 is one word: Hydra's sweep
launch=(campaign launch -m platform=local gpus=1,2 experiment=weak_scaling
        "experiment.base_iterations=${BASE_ITERATIONS:-600}" experiment.profile_iterations=8 store.heartbeat_s=1
        name=main-job "$@")
heading "the launch: its points, each one's estimate"
{ echo "\$ ${launch[*]}"; "$py" -m "${launch[@]}"; } | tee "$out/launch.txt"
if [[ -n $README ]]; then  # campaign status at the first moment a point reports its rate
  { echo "\$ campaign status main-job"; "$py" scripts/readme_blocks.py snapshot main-job; } > "$out/status.txt"
fi
heading "its points until each has ended"
echo "\$ campaign status main-job --wait"
"${campaign[@]}" status main-job --wait
heading "speedup and parallel efficiency"
{ echo "\$ campaign harvest main-job"; "${campaign[@]}" harvest main-job; } | tee "$out/harvest.txt"
heading "the same as CSV, figures and a report page"
"${campaign[@]}" harvest main-job --to csv --out "$CAMPAIGN_RESULTS/main-job.csv"
# --plots prints the harvest table again besides its figures: shown above already
"${campaign[@]}" harvest main-job --plots "$CAMPAIGN_RESULTS/figures" >/dev/null
# the page a group reads: every section the campaign has data for, one self-contained file
"${campaign[@]}" report main-job --out "$CAMPAIGN_RESULTS/main-job-report.html"
if [[ -n $README ]]; then
  for block in launch status harvest; do
    $py scripts/readme_blocks.py set "main-job-$block" "$out/$block.txt"
  done
  cp "$CAMPAIGN_RESULTS/figures/speedup.png" docs/main-job-speedup.png
  if command -v chromium >/dev/null; then  # the manual's picture of the report (scripts/setup.sh installs chromium)
    chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1280,2400 \
      --screenshot="$PWD/docs/img/report.png" "file://$CAMPAIGN_RESULTS/main-job-report.html" 2>/dev/null
  fi
  echo "the main-job blocks (README.md, docs/getting-started.md) and docs/main-job-speedup.png written from campaign in $CAMPAIGN_RESULTS"
fi
