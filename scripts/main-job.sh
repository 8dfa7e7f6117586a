#!/usr/bin/env bash
# main-job.sh - the README's first command: a small real weak-scaling campaign on this
# machine (platform=local: one CPU process per "GPU", gloo), end to end: launch, wait
# for the jobs, harvest speedup and parallel efficiency. A couple of minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh train
export CAMPAIGN_RESULTS=${CAMPAIGN_RESULTS:-$PWD/results}
mkdir -p "$CAMPAIGN_RESULTS"
.venv/bin/python -m campaign.launch -m platform=local gpus=1,2 experiment=weak_scaling \
  experiment.base_iterations=${BASE_ITERATIONS:-600} experiment.profile_iterations=8 name=main-job "$@"
.venv/bin/campaign status --wait
.venv/bin/campaign harvest
.venv/bin/campaign harvest --to csv --out "$CAMPAIGN_RESULTS/main-job.csv"
