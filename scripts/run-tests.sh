#!/usr/bin/env bash
# run-tests.sh [--fast] [pytest args] - the README's second command (and what .ci/run calls):
# install campaign with the test extras (and the optional DeepSpeed engine, whose tests
# run too), bring up the local SLURM test cluster (two nodes, n1 and n2, so that nodes=2
# points really span two slurmds: tests/test_internode.py) and a private PostgreSQL on
# loopback, run the whole test suite on three pytest-xdist workers, stop what it started.
#
# --fast: the edit-test loop's lane: no SLURM, no PostgreSQL, no training, no browser
# (markers slurm, postgres, slow, gpu, browser deselected); it starts no service, but brings
# back up a local cluster that was started here once and stopped (below).
#
# The suite runs on three workers (CAMPAIGN_TEST_WORKERS, default 3; tests/conftest.py: the
# SLURM tests one group, every other module its own, the costliest first by
# tests/durations.json): on 2 cores, 19.7 min of tests for 1,734 (2026-11-28), 38.5 for 1,907 on a quiet
# machine (2026-11-29), 33.7 for 1,921 with the fork server and tmpfs, 32.0 for 1,914 with modules sharing their campaigns,
# 21.9 for 1,902 on a quiet machine with the seventh session's cuts (bound by CPU, docs/performance.md: goal missed by ~2 min),
# 14.9 to 20.4 for 1,922-1,927 on 2026-11-30, five of six clean-clone runs under 20, 17.0 in suite_time.py's saved run (docs/performance.md)
# (most of a test's time is its jobs' and commands' start-up, which is CPU). -n 0 after the
# command runs it in this process, as plain pytest. It prints the 25 slowest tests and the total.
#
# The cluster's knobs (LOCAL_SLURM_BASE, LOCAL_SLURM_PORT, ...: scripts/LOCAL-SLURM.md)
# pass through, so the suite can run against a second cluster beside a running one.
set -euo pipefail
cd "$(dirname "$0")/.."
fast=
args=()
for arg in "$@"; do
  if [[ $arg == --fast ]]; then fast=1; else args+=("$arg"); fi
done
# DeepSpeed builds its CPU communication op (deepspeed_shm_comm) with torch's extension builder,
# into one cache shared by every venv of this user unless told otherwise: a build records its
# venv's path, so two checkouts' suites rebuilt it in turn, each build minutes of compiler CPU
# (19 rebuilds in one day here). This checkout's venv keeps its own, built by setup.sh.
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-$PWD/.venv/torch_extensions}
bash scripts/setup.sh train,test,deepspeed
started=()
cleanup() { for s in "${started[@]}"; do bash "scripts/local-$s.sh" stop >/dev/null 2>&1 || true; done; }
trap cleanup EXIT
if [[ -n $fast ]]; then
  echo "[tests] fast lane: no SLURM, PostgreSQL, training or browser tests (the whole suite: without --fast)"
  # A local cluster started once and stopped leaves SLURM's clients its config, whose controller
  # does not answer: each sinfo then waits ~9 s (dry runs ask it). Up again it answers at once.
  if [[ $(id -u) == 0 ]] && command -v sinfo >/dev/null && [[ -e /etc/slurm/slurm.conf ]] \
      && ! bash scripts/local-slurm.sh status >/dev/null 2>&1; then
    bash scripts/local-slurm.sh start >/dev/null 2>&1 && started+=(slurm)
  fi
elif [[ $(id -u) == 0 && ${CAMPAIGN_TEST_SERVICES:-1} == 1 ]]; then
  bash scripts/local-slurm.sh status >/dev/null 2>&1 || { bash scripts/local-slurm.sh start && started+=(slurm); }
  bash scripts/local-postgres.sh status >/dev/null 2>&1 || { bash scripts/local-postgres.sh start && started+=(postgres); }
  eval "$(bash scripts/local-slurm.sh env)"
  queued=$(squeue -h -o %A 2>/dev/null | wc -l)
  if ((queued > 0)); then  # a cluster this run did not start may be another run's
    echo "[tests] $queued job(s) already in the test cluster's queue: the SLURM tests' jobs wait behind them" \
      "(squeue; bash scripts/local-slurm.sh stop && start empties it)"
  fi
  held=$(squeue -h -t all -o %A 2>/dev/null | wc -l)  # ended jobs' records too: MinJobAge, 600 s
  cap=$(scontrol show config 2>/dev/null | awk '$1 == "MaxJobCount" {print $3}')
  if [[ ${cap:-} =~ ^[0-9]+$ ]] && ((cap - held < 2000)); then
    echo "[tests] the test cluster holds $held job records of its MaxJobCount $cap: the SLURM tests' jobs" \
      "may wait for room (bash scripts/local-slurm.sh stop --purge && start begins with none)"
  fi
  nodes=$(sinfo -h -p a100 -o %D 2>/dev/null | head -n 1)
  if [[ ${nodes:-0} -lt 2 ]]; then
    echo "[tests] the running SLURM cluster has ${nodes:-no} node(s): nodes=2 tests will be skipped" \
      "(sudo bash scripts/local-slurm.sh start reconfigures it with two)"
  fi
else
  echo "[tests] not root (or CAMPAIGN_TEST_SERVICES=0): SLURM and PostgreSQL tests will be skipped"
fi
lane=(-n "${CAMPAIGN_TEST_WORKERS:-3}" --dist loadgroup --no-loadscope-reorder --durations=25)
# The tests' folders in memory (tmpfs) when it has room: their stores, stand-ins, job folders and
# logs are written and read again within minutes, and on disk the kernel's writeback of them took
# about a fifth of a whole run's CPU. A passed test's folder goes at its end (pytest's retention
# policy "failed"); one per checkout, emptied by the next run of it. CAMPAIGN_TEST_BASETEMP=DIR: elsewhere.
shm=/dev/shm
if [[ -z ${CAMPAIGN_TEST_BASETEMP:-} && -d $shm && -w $shm ]] \
    && (( $(df -Pk "$shm" | awk 'NR==2 {print $4}') > 6 * 1024 * 1024 )); then
  CAMPAIGN_TEST_BASETEMP=$shm/campaign-tests-$(id -u)-$(pwd | cksum | cut -d' ' -f1)
fi
if [[ -n ${CAMPAIGN_TEST_BASETEMP:-} ]]; then
  lane+=(--basetemp "$CAMPAIGN_TEST_BASETEMP" -o tmp_path_retention_policy=failed)
fi
if [[ -n $fast ]]; then
  lane+=(-m "not slow and not slurm and not postgres and not gpu and not browser")
fi
set +e
.venv/bin/python -m pytest "${lane[@]}" "${args[@]}"
rc=$?
set -e
# pytest-xdist's workers leave their folders (module fixtures' ones too) under the base: in
# memory, so gone after a run that passed; kept, and named, after one that did not.
if [[ -n ${CAMPAIGN_TEST_BASETEMP:-} && -d $CAMPAIGN_TEST_BASETEMP ]]; then
  if ((rc == 0)); then rm -rf "$CAMPAIGN_TEST_BASETEMP"
  else echo "[tests] the failed tests' folders: $CAMPAIGN_TEST_BASETEMP (in memory: rm -rf it when done)"; fi
fi
# pytest exits 5 when it collected nothing: that is a failure here, not a pass.
exit $rc
