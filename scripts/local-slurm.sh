#!/usr/bin/env bash
# local-slurm.sh - a real Slurm cluster on one machine for campaign's tests, CI and laptops.
#
#   munged -> mariadbd (private datadir, 127.0.0.1:$LOCAL_SLURM_DB_PORT) -> slurmdbd
#          -> slurmctld -> one slurmd per node (slurmd -N n1, slurmd -N n2, ...)
#
# Two nodes by default (n1, n2: LOCAL_SLURM_NODES), every one in partitions v100
# (default), a100 and a100_nvlink, the 8 fake GPUs split over them (gres File= symlinks
# to /dev/null) and node features a100_40g,a100_80g, so the project's platforms submit
# unchanged and nodes=2 points really span two slurmds. Every node is this machine:
# NodeAddr=127.0.0.1, so no name needs an /etc/hosts entry (jobs find the master's
# address through SLURM's NodeAddr: trainers/rendezvous.py). Accounting is on: submitit
# learns that a job was cancelled or timed out only through sacct.
#
# Several clusters can run side by side: each takes its folder, ports and name from
# LOCAL_SLURM_BASE, LOCAL_SLURM_PORT, LOCAL_SLURM_DB_PORT and LOCAL_SLURM_CLUSTER.
#
# Usage: local-slurm.sh start | stop [--purge] | status | env | help
# See scripts/LOCAL-SLURM.md for the knobs and the pitfalls this script works around.
set -euo pipefail

BASE=${LOCAL_SLURM_BASE:-${TMPDIR:-/tmp}/campaign-slurm}
# 128: enough for the project's platforms as configured (an 8-GPU A100 NVLINK job asks for
# 8 tasks x 16 CPUs); the node is oversubscribed, jobs cap their threads at the real cores.
CPUS=${LOCAL_SLURM_CPUS:-128}  # per node
NODES=${LOCAL_SLURM_NODES:-2}
GPUS=${LOCAL_SLURM_GPUS:-8}  # of the whole cluster, split evenly over the nodes
MEM_MB=${LOCAL_SLURM_MEM_MB:-16000}  # per node
DB_PORT=${LOCAL_SLURM_DB_PORT:-13306}
PORT=${LOCAL_SLURM_PORT:-6817}
LINK_ETC=${LOCAL_SLURM_LINK_ETC:-1}
CLUSTER=${LOCAL_SLURM_CLUSTER:-campaign}
# Job records the controller holds (an array task is one; an ended one stays MinJobAge, 600 s):
# benchmarks/launch.py --variant floor --sizes 1000,10000 submits ~24,000 in a few minutes.
MAX_JOBS=${LOCAL_SLURM_MAX_JOBS:-10000}
NODE_PREFIX=${LOCAL_SLURM_NODE_PREFIX:-n}
# a100_40g/a100_80g: the constraints of the built-in a100_nvlink_* platforms. emulated_gpu:
# these nodes' GPUs are gres entries over /dev/null with CPU ranks behind them; a launch
# reads the feature from sinfo and does not check such a partition's compute capability
# against the torch build (campaign/launch/arch.py).
FEATURES=a100_40g,a100_80g,emulated_gpu
# Slurm's default ports from PORT=6817: slurmctld 6817, slurmd 6818, slurmdbd 6819; the
# slurmd of node k >= 2 listens on PORT+1+k (6820, 6821, ...).
CTLD_PORT=$PORT SLURMD_PORT=$((PORT + 1)) DBD_PORT=$((PORT + 2))

ETC=$BASE/etc RUN=$BASE/run LOGS=$BASE/log
export SLURM_CONF=$ETC/slurm.conf
HOST=$(hostname -s)
# One node: this machine's name (as before multi-node clusters). More: n1..nN, all on
# this machine (NodeHostname), each slurmd on its own port.
if [[ $NODES == 1 ]]; then NODE_NAMES=("$HOST"); else
  NODE_NAMES=()
  for ((k = 1; k <= ${NODES//[^0-9]/0}; k++)); do NODE_NAMES+=("$NODE_PREFIX$k"); done
fi
# node_port K (1-based): the slurmd port of node K
node_port() { if (($1 == 1)); then echo "$SLURMD_PORT"; else echo $((PORT + 1 + $1)); fi; }
slurmd_pid() { echo "$RUN/slurmd-$1.pid"; }
# stop and status act on the nodes the cluster was started with (its slurm.conf), not on
# this call's LOCAL_SLURM_NODES: a cluster of 3 stopped without the knob stops all 3.
configured_nodes() { [[ -f $ETC/slurm.conf ]] && sed -n 's/^NodeName=\([^ ]*\).*/\1/p' "$ETC/slurm.conf"; return 0; }
use_configured_nodes() {
  local names
  names=$(configured_nodes)
  [[ -n $names ]] && mapfile -t NODE_NAMES <<<"$names"
  return 0
}
# microseconds since the epoch (EPOCHREALTIME is "s.us", "s,us" in some locales)
now_us() { echo "${EPOCHREALTIME/[.,]/}"; }
T0=$(now_us)
CTLD_FRESH=0  # set when this run started slurmctld (start_slurmctld)

usage() {
  cat <<EOF
usage: $(basename "$0") start | stop [--purge] | status | env | help

  start         install missing packages, start munged, mariadbd, slurmdbd, slurmctld
                and one slurmd per node (only those not running), wait until every node
                is idle and sacct answers. Idempotent: a second start returns in about a second.
  stop          cancel jobs left in the queue and stop the daemons by their pid files.
  stop --purge  also delete $BASE (state, database, logs) and the /etc/slurm link.
  status        show daemons, sinfo and sacct; exit 0 only when the cluster answers.
  env           print export lines for clients:  eval "\$($(basename "$0") env)"

example:
  sudo bash scripts/local-slurm.sh start
  sbatch -p a100 --gpus-per-node=2 --wrap 'echo \$CUDA_VISIBLE_DEVICES'
  srun -N 2 --ntasks-per-node=2 bash -c 'echo \$SLURM_PROCID on \$SLURMD_NODENAME'

knobs (environment): LOCAL_SLURM_BASE ($BASE), LOCAL_SLURM_NODES ($NODES),
  LOCAL_SLURM_CPUS ($CPUS per node), LOCAL_SLURM_GPUS ($GPUS, split over the nodes),
  LOCAL_SLURM_MEM_MB ($MEM_MB per node), LOCAL_SLURM_PORT ($PORT: slurmctld; slurmd +1,
  slurmdbd +2, node k>=2 +1+k), LOCAL_SLURM_DB_PORT ($DB_PORT), LOCAL_SLURM_CLUSTER ($CLUSTER),
  LOCAL_SLURM_NODE_PREFIX ($NODE_PREFIX: nodes ${NODE_PREFIX}1..${NODE_PREFIX}N when more than one),
  LOCAL_SLURM_LINK_ETC ($LINK_ETC: link /etc/slurm/slurm.conf to the generated config),
  LOCAL_SLURM_MAX_JOBS ($MAX_JOBS: MaxJobCount, the job records the controller holds)

a second cluster beside the default one (its own folder, ports, database and name):
  LOCAL_SLURM_BASE=/tmp/campaign-slurm2 LOCAL_SLURM_PORT=7817 LOCAL_SLURM_DB_PORT=13406 \\
    LOCAL_SLURM_CLUSTER=campaign2 LOCAL_SLURM_LINK_ETC=0 bash $(basename "$0") start
EOF
}

# ------------------------------------------------------------------ helpers
# elapsed START_US -> seconds with one decimal
elapsed() {
  local d=$(($(now_us) - $1))
  printf '%d.%d' $((d / 1000000)) $((d / 100000 % 10))
}
log() { printf '[local-slurm +%5ss] %s\n' "$(elapsed "$T0")" "$*" >&2; }
# die MESSAGE [LOGFILE]: say what failed, show the log's tail and where it is.
die() {
  log "error: $1"
  if [[ -n ${2:-} && -f $2 ]]; then
    tail -n 15 "$2" | sed 's/^/    | /' >&2
    log "full log: $2"
  fi
  exit 1
}
# phase; ... ; done_phase MESSAGE  -> logs MESSAGE with the phase's duration
phase() { PHASE_T=$(now_us); }
done_phase() { log "$* ($(elapsed "$PHASE_T")s)"; }

# running PIDFILE COMM: the pid in PIDFILE is a live process named COMM
# (the name check guards against a stale pid file whose pid was reused).
running() {
  local pid stat
  [[ -s $1 ]] || return 1
  pid=$(<"$1")
  [[ $pid =~ ^[0-9]+$ && -r /proc/$pid/comm && $(<"/proc/$pid/comm") == "$2" ]] || return 1
  # A daemon killed (a session's end) whose parent never reaps it stays a zombie with its
  # name: dead, not running. /proc/PID/stat's third field is the state, after "(comm)".
  stat=$(<"/proc/$pid/stat") 2>/dev/null || return 1
  stat=${stat##*) }
  [[ ${stat:0:1} != Z ]]
}
tcp_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# wait_for SECONDS WHAT LOGFILE CMD...: poll CMD every 0.2 s
wait_for() {
  local limit=$1 what=$2 logfile=$3 end
  shift 3
  end=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < end)) || die "timed out after ${limit}s waiting for $what" "$logfile"
    sleep 0.2
  done
}
# port_ours PORT: the process listening on PORT is one of this cluster's daemons (its pid
# in a pid file of $RUN): e.g. the slurmd of a node that a new LOCAL_SLURM_NODES renames.
port_ours() {
  local pid f
  for pid in $(ss -ltnpH "sport = :$1" 2>/dev/null | grep -o 'pid=[0-9]*' | cut -d= -f2); do
    for f in "$RUN"/*.pid; do [[ -s $f && $(<"$f") == "$pid" ]] && return 0; done
  done
  return 1
}
# port_free PORT OWNER_PIDFILE OWNER_COMM: refuse a port held by someone else
port_free() {
  if tcp_open "$1" && ! running "$2" "$3" && ! port_ours "$1"; then
    die "127.0.0.1:$1 is already in use by another process (see: ss -ltnp 'sport = :$1'); stop it or another cluster first"
  fi
}
# stop_pid NAME PIDFILE COMM: SIGTERM, wait up to 15 s, then SIGKILL
stop_pid() {
  local name=$1 file=$2 comm=$3 pid
  if running "$file" "$comm"; then
    pid=$(<"$file")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
      kill -9 "$pid" 2>/dev/null || true
      log "killed -9 $name (pid $pid)"
    else
      log "stopped $name (pid $pid)"
    fi
  fi
  rm -f "$file"
}

# ------------------------------------------------------------------ start phases
install_packages() {
  local pkgs=(munge slurmctld slurmd slurm-client slurmdbd mariadb-server) missing=() p
  for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  ((${#missing[@]})) || return 0
  phase
  log "installing ${missing[*]}"
  local apt_log=$LOGS/apt.log
  export DEBIAN_FRONTEND=noninteractive
  # The package lists are usually fresh enough; update only when the install fails.
  if ! apt-get install -y -q --no-install-recommends "${missing[@]}" >"$apt_log" 2>&1; then
    log "install failed; running apt-get update and retrying"
    { apt-get update -q && apt-get install -y -q --no-install-recommends "${missing[@]}"; } \
      >>"$apt_log" 2>&1 || die "apt-get install ${missing[*]} failed" "$apt_log"
  fi
  done_phase "packages installed"
}

start_munge() {
  if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    log "munged already running"
    return 0
  fi
  phase
  if [[ ! -s /etc/munge/munge.key ]]; then
    mkdir -p /etc/munge
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
    log "created /etc/munge/munge.key"
  fi
  chown munge:munge /etc/munge /etc/munge/munge.key
  chmod 700 /etc/munge
  chmod 400 /etc/munge/munge.key
  mkdir -p /run/munge /var/lib/munge /var/log/munge
  chown munge:munge /run/munge /var/lib/munge /var/log/munge
  chmod 755 /run/munge
  rm -f /run/munge/munge.socket.2 /run/munge/munge.socket.2.lock
  # Daemons must not inherit our stdout/stderr: a caller reading them through a pipe
  # (a test fixture, $(...)) would otherwise wait for the daemon to exit.
  runuser -u munge -- /usr/sbin/munged --pid-file=/run/munge/munged.pid \
    </dev/null >>"$LOGS/munged.out" 2>&1 || die "munged failed to start" /var/log/munge/munged.log
  wait_for 20 munged /var/log/munge/munged.log bash -c 'munge -n | unmunge'
  # Remember that this script started munged, so that stop stops only ours.
  cp /run/munge/munged.pid "$RUN/munged.ours"
  done_phase "munged up (pid $(</run/munge/munged.pid))"
}

start_mariadb() {
  local datadir=$BASE/mysql sock=$RUN/mysqld.sock db_log=$LOGS/mariadb.log
  local mysql=(mariadb --no-defaults -S "$sock" -uroot)
  if running "$RUN/mariadb.pid" mariadbd; then
    log "mariadb already running"
    return 0
  fi
  phase
  port_free "$DB_PORT" "$RUN/mariadb.pid" mariadbd
  if [[ ! -d $datadir/mysql ]]; then
    rm -rf "$datadir"
    mariadb-install-db --no-defaults --datadir="$datadir" --user=root \
      --auth-root-authentication-method=socket --skip-test-db >"$LOGS/mariadb-install.log" 2>&1 \
      || die "mariadb-install-db failed" "$LOGS/mariadb-install.log"
    log "initialised mariadb datadir $datadir"
  fi
  # Sizes follow Slurm's accounting guide (innodb_buffer_pool_size, log size, lock wait). A test
  # cluster's accounting need not outlive a crash of this machine: its log is written at each
  # commit and flushed to disk once a second, not synced at every job's record.
  setsid /usr/sbin/mariadbd --no-defaults --datadir="$datadir" --user=root \
    --socket="$sock" --port="$DB_PORT" --bind-address=127.0.0.1 --skip-name-resolve \
    --pid-file="$RUN/mariadb.pid" --log-error="$db_log" \
    --innodb-buffer-pool-size=256M --innodb-log-file-size=64M --innodb-lock-wait-timeout=900 \
    --innodb-flush-log-at-trx-commit=2 \
    </dev/null >>"$LOGS/mariadb.out" 2>&1 &
  wait_for 60 "mariadb on 127.0.0.1:$DB_PORT" "$db_log" "${mysql[@]}" -e 'select 1'
  "${mysql[@]}" -e "
    CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurm';
    CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurm';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';" \
    || die "could not create the slurm database user" "$db_log"
  done_phase "mariadb up (pid $(<"$RUN/mariadb.pid"), 127.0.0.1:$DB_PORT)"
}

# The node lines: one per node, all on this machine (NodeHostname) at 127.0.0.1, each
# slurmd on its own port; GPUs split evenly.
render_nodes() {
  local k gres="" per=$((GPUS / NODES)) names
  ((per > 0)) && gres=" Gres=gpu:$per"
  for ((k = 1; k <= NODES; k++)); do
    echo "NodeName=${NODE_NAMES[k - 1]} NodeHostname=$HOST NodeAddr=127.0.0.1 Port=$(node_port "$k")" \
      "CPUs=$CPUS Boards=1 SocketsPerBoard=1 CoresPerSocket=$CPUS ThreadsPerCore=1 RealMemory=$MEM_MB$gres" \
      "Features=$FEATURES State=UNKNOWN"
  done
  names=$(IFS=,; echo "${NODE_NAMES[*]}")
  echo "PartitionName=v100 Nodes=$names Default=YES MaxTime=INFINITE State=UP"
  echo "PartitionName=a100 Nodes=$names MaxTime=INFINITE State=UP"
  echo "PartitionName=a100_nvlink Nodes=$names MaxTime=INFINITE State=UP"
}

render_slurm_conf() {
  cat <<EOF
# Generated by campaign scripts/local-slurm.sh; edits are overwritten on start.
ClusterName=$CLUSTER
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# A requeued job may start again only after cred_expire seconds (default 120).
AuthInfo=cred_expire=10
MpiDefault=none
SwitchType=switch/none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
# Cores only: with memory as a consumable, a job without --mem takes the whole node.
SelectTypeParameters=CR_Core
GresTypes=gpu
# The node advertises more CPUs than the machine has (oversubscribed on purpose).
SlurmdParameters=config_overrides
ReturnToService=2
# Refuse at sbatch time what no node can ever run (e.g. -c 32 on a 16-CPU node) instead of
# leaving it PENDING (PartitionConfig) forever, as a misconfigured test would hang.
EnforcePartLimits=ALL
# Time limits are checked every 30 s (PERIODIC_TIMEOUT, compiled in); OverTimeLimit=0
# adds no grace, so a --time=1 job ends TIMEOUT 60-90 s after it starts.
OverTimeLimit=0
# Seconds between SIGTERM and SIGKILL at the time limit / scancel (slurmd waits >= 5).
KillWait=5
# Finished jobs stay visible to squeue/scontrol for 10 minutes (sacct keeps them forever).
MinJobAge=600
# Array indices 0..1000 (MaxArraySize - 1); submitit's map_array needs one index per task.
MaxArraySize=1001
MaxJobCount=$MAX_JOBS
MailProg=/bin/true
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$DBD_PORT
AccountingStorageTRES=gres/gpu
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30
StateSaveLocation=$BASE/state
# %n: the node's name, so that the slurmds of one machine keep their files apart.
SlurmdSpoolDir=$BASE/spool/%n
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd-%n.pid
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
$(render_nodes)
EOF
}

render_gres_conf() {
  echo "# Generated by campaign scripts/local-slurm.sh."
  # Slurm 22.05 drops GPUs without File= and then drains the node; /dev/null symlinks
  # are valid character devices with nothing behind them.
  echo "AutoDetect=off"
  local per=$((GPUS / NODES)) name
  if ((per > 0)); then
    for name in "${NODE_NAMES[@]}"; do echo "NodeName=$name Name=gpu File=$BASE/dev/$name/nvidia[0-$((per - 1))]"; done
  fi
  return 0
}

render_slurmdbd_conf() {
  cat <<EOF
# Generated by campaign scripts/local-slurm.sh.
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$DBD_PORT
SlurmUser=root
DebugLevel=info
LogFile=$LOGS/slurmdbd.log
PidFile=$RUN/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=slurm
StorageLoc=slurm_acct_db
EOF
}

# write_conf FILE MODE CONTENT: write only when it differs; return 0 if written
write_conf() {
  if [[ -f $1 && "$(<"$1")" == "$3" ]]; then
    chmod "$2" "$1"
    return 1
  fi
  printf '%s\n' "$3" >"$1.new"
  chmod "$2" "$1.new"
  mv "$1.new" "$1"
  log "wrote $1"
}

write_configs() {
  local i name old
  old=$(configured_nodes)  # a new node list: the slurmds of the old one must stop too
  for name in "${NODE_NAMES[@]}"; do
    mkdir -p "$BASE/dev/$name" "$BASE/spool/$name"
    for ((i = 0; i < GPUS / NODES; i++)); do ln -sfn /dev/null "$BASE/dev/$name/nvidia$i"; done
  done
  SLURM_CHANGED=0 DBD_CHANGED=0
  write_conf "$ETC/slurm.conf" 644 "$(render_slurm_conf)" && SLURM_CHANGED=1
  write_conf "$ETC/gres.conf" 644 "$(render_gres_conf)" && SLURM_CHANGED=1
  # slurmdbd refuses a slurmdbd.conf readable by others (it holds the DB password).
  write_conf "$ETC/slurmdbd.conf" 600 "$(render_slurmdbd_conf)" && DBD_CHANGED=1
  link_etc
  # Running daemons keep the configuration they started with.
  if ((DBD_CHANGED)); then stop_pid slurmdbd "$RUN/slurmdbd.pid" slurmdbd; fi
  if ((SLURM_CHANGED)); then
    # shellcheck disable=SC2086
    stop_slurmds $old
    stop_pid slurmctld "$RUN/slurmctld.pid" slurmctld
  fi
}

# Clients (sbatch, sacct, submitit, srun inside jobs) read /etc/slurm/slurm.conf unless
# SLURM_CONF is set: point it at ours, but never replace a configuration we did not write,
# nor the link of another cluster whose configuration exists (another LOCAL_SLURM_BASE).
link_etc() {
  [[ $LINK_ETC == 1 ]] || return 0
  local target=/etc/slurm/slurm.conf current
  mkdir -p /etc/slurm
  current=$(readlink "$target" 2>/dev/null) || current=""
  [[ $current == "$ETC/slurm.conf" ]] && return 0
  if [[ -L $target && -e $target ]]; then
    log "warning: $target links to another cluster's $current, left alone; clients need: eval \"\$($0 env)\""
  elif [[ -L $target || ! -e $target ]]; then
    ln -sfn "$ETC/slurm.conf" "$target"
    log "linked $target -> $ETC/slurm.conf"
  else
    log "warning: $target is a real file, left alone; clients need: eval \"\$($0 env)\""
  fi
}

start_slurmdbd() {
  if running "$RUN/slurmdbd.pid" slurmdbd; then
    log "slurmdbd already running"
    return 0
  fi
  phase
  port_free "$DBD_PORT" "$RUN/slurmdbd.pid" slurmdbd
  slurmdbd </dev/null >>"$LOGS/slurmdbd.out" 2>&1 || die "slurmdbd failed to start" "$LOGS/slurmdbd.log"
  wait_for 60 "slurmdbd on 127.0.0.1:$DBD_PORT" "$LOGS/slurmdbd.log" tcp_open "$DBD_PORT"
  done_phase "slurmdbd up (pid $(<"$RUN/slurmdbd.pid"))"
}

start_slurmctld() {
  if running "$RUN/slurmctld.pid" slurmctld; then
    log "slurmctld already running"
    return 0
  fi
  CTLD_FRESH=1
  phase
  port_free "$CTLD_PORT" "$RUN/slurmctld.pid" slurmctld
  slurmctld </dev/null >>"$LOGS/slurmctld.out" 2>&1 || die "slurmctld failed to start" "$LOGS/slurmctld.log"
  wait_for 60 slurmctld "$LOGS/slurmctld.log" bash -c 'scontrol ping | grep -q UP'
  done_phase "slurmctld up (pid $(<"$RUN/slurmctld.pid"))"
}

# start_slurmd K: the slurmd of node K (1-based). With one node, plain slurmd (it finds
# its node by this machine's name); with more, slurmd -N NAME, one daemon per node.
start_slurmd() {
  local k=$1 name=${NODE_NAMES[$1 - 1]} pidfile
  pidfile=$(slurmd_pid "$name")
  if running "$pidfile" slurmd; then
    log "slurmd $name already running"
    return 0
  fi
  phase
  port_free "$(node_port "$k")" "$pidfile" slurmd
  local args=()
  ((NODES > 1)) && args=(-N "$name")
  slurmd "${args[@]}" </dev/null >>"$LOGS/slurmd-$name.out" 2>&1 \
    || die "slurmd $name failed to start" "$LOGS/slurmd-$name.log"
  wait_for 30 "slurmd $name" "$LOGS/slurmd-$name.log" running "$pidfile" slurmd
  done_phase "slurmd $name up (pid $(<"$pidfile"), 127.0.0.1:$(node_port "$k"))"
}

# stop_slurmds [MORE_NAMES...]: the slurmds of this cluster's nodes (and of MORE_NAMES)
stop_slurmds() {
  local name
  for name in "${NODE_NAMES[@]}" "$@"; do stop_pid "slurmd $name" "$(slurmd_pid "$name")" slurmd; done
  # a slurmd started before multi-node clusters (its pid file had no node name)
  stop_pid slurmd "$RUN/slurmd.pid" slurmd
}

# cancel_queue WHY: every job in the queue cancelled (WHY and their ids logged), and up to
# 20 s for the queue to empty (a job whose node lost it ends when its slurmd answers).
cancel_queue() {
  local jobs
  jobs=$(squeue -h -o %A 2>/dev/null | tr '\n' ' ') || jobs=""
  [[ -n ${jobs// /} ]] || return 0
  log "$1: $jobs"
  # shellcheck disable=SC2086
  scancel $jobs 2>/dev/null || true
  for _ in $(seq 100); do [[ -z $(squeue -h 2>/dev/null) ]] && return 0; sleep 0.2; done
  log "still queued after 20 s: $(squeue -h -o '%A %T' 2>/dev/null | tr '\n' ' ')"
}

# Every node must end up usable; a DRAIN/DOWN left from an earlier run is resumed once a
# second. A node that keeps draining (e.g. gres mismatch) fails with its reason.
wait_node_ready() {
  phase
  local state reason name states=() end=$((SECONDS + 60))
  for name in "${NODE_NAMES[@]}"; do
    while :; do
      state=$(sinfo -h -n "$name" -o %T 2>/dev/null | head -n 1) || state=""
      case $state in
        idle | mixed | allocated | completing) break ;;
        *drain* | down | fail* | inval*)
          reason=$(sinfo -h -R -n "$name" -o %E 2>/dev/null | head -n 1)
          log "node $name is $state (${reason:-no reason}); resuming"
          scontrol update nodename="$name" state=resume 2>/dev/null || true
          sleep 1
          ;;
      esac
      ((SECONDS < end)) || die "node $name never became idle (state '${state:-?}', reason '${reason:-}')" \
        "$LOGS/slurmd-$name.log"
      sleep 0.2
    done
    states+=("$name $state")
  done
  wait_for 30 "cluster '$CLUSTER' registered in slurmdbd" "$LOGS/slurmctld.log" \
    bash -c "sacctmgr -n -P show cluster format=cluster | grep -qx $CLUSTER && sacct -n -X -S now"
  done_phase "$(IFS=,; echo "${states[*]}"), accounting answers"
}

# check_knobs: the numeric environment knobs are positive integers
check_knobs() {
  local name
  for name in LOCAL_SLURM_CPUS:$CPUS LOCAL_SLURM_GPUS:$GPUS LOCAL_SLURM_MEM_MB:$MEM_MB LOCAL_SLURM_DB_PORT:$DB_PORT \
    LOCAL_SLURM_NODES:$NODES LOCAL_SLURM_PORT:$PORT LOCAL_SLURM_MAX_JOBS:$MAX_JOBS; do
    [[ ${name#*:} =~ ^[0-9]+$ ]] || die "${name%%:*}='${name#*:}' is not a whole number"
  done
  ((CPUS >= 1)) || die "LOCAL_SLURM_CPUS must be at least 1"
  ((NODES >= 1)) || die "LOCAL_SLURM_NODES must be at least 1"
  ((GPUS % NODES == 0)) || die "LOCAL_SLURM_GPUS=$GPUS does not split evenly over LOCAL_SLURM_NODES=$NODES nodes"
  ((PORT >= 1024 && PORT + 1 + NODES <= 65535)) \
    || die "LOCAL_SLURM_PORT=$PORT: its ports $PORT..$((PORT + 1 + NODES)) must lie in 1024..65535"
  [[ $CLUSTER =~ ^[a-z][a-z0-9_]*$ ]] \
    || die "LOCAL_SLURM_CLUSTER='$CLUSTER': lower-case letters, digits and _ only (a Slurm cluster name)"
  [[ $NODE_PREFIX =~ ^[A-Za-z][A-Za-z0-9-]*$ ]] || die "LOCAL_SLURM_NODE_PREFIX='$NODE_PREFIX': letters, digits and - only"
}

cmd_start() {
  [[ $(id -u) == 0 ]] || die "start must run as root (it installs packages and starts daemons)"
  check_knobs
  # Before anything is written: another cluster (another LOCAL_SLURM_BASE) must not own the ports.
  port_free "$DB_PORT" "$RUN/mariadb.pid" mariadbd
  port_free "$DBD_PORT" "$RUN/slurmdbd.pid" slurmdbd
  port_free "$CTLD_PORT" "$RUN/slurmctld.pid" slurmctld
  local k
  for ((k = 1; k <= NODES; k++)); do port_free "$(node_port "$k")" "$(slurmd_pid "${NODE_NAMES[k - 1]}")" slurmd; done
  mkdir -p "$ETC" "$RUN" "$LOGS" "$BASE/state" "$BASE/spool"
  install_packages
  start_munge
  start_mariadb
  write_configs
  start_slurmdbd
  start_slurmctld
  for ((k = 1; k <= NODES; k++)); do start_slurmd "$k"; done
  wait_node_ready
  # A controller started afresh recovers the jobs its saved state holds: those of a session
  # that ended without `stop` (its processes gone) would hold GPUs as RUNNING until the
  # controller finds their batch step missing (~30 min), and keep every later job pending.
  # A started cluster's queue is empty, as after `stop`.
  ((CTLD_FRESH)) && cancel_queue "cancelling jobs left from before this start"
  # Ended jobs' records stay MinJobAge (600 s) and count against MaxJobCount, those a stopped
  # controller saved too: after a large benchmark they can leave no room for new jobs.
  local held
  held=$(squeue -h -t all -o %A 2>/dev/null | wc -l)
  if ((held * 10 > MAX_JOBS)); then
    log "note: the controller holds $held job records from before this start (MaxJobCount $MAX_JOBS):" \
      "they leave room for $((MAX_JOBS > held ? MAX_JOBS - held : 0)) new jobs until they age out" \
      "(MinJobAge, 600 s); 'stop --purge' then 'start' begins with none"
  fi
  log "ready in $(elapsed "$T0")s: cluster $CLUSTER, partitions $(sinfo -h -o %P | tr '\n' ' ')-" \
    "$NODES node(s) $(IFS=,; echo "${NODE_NAMES[*]}"), each $CPUS cpus, ${MEM_MB} MB, gpu:$((GPUS / NODES))," \
    "features $FEATURES; SLURM_CONF=$SLURM_CONF"
}

cmd_stop() {
  use_configured_nodes
  local purge=0
  case ${1:-} in
    "") ;;
    --purge) purge=1 ;;
    *) die "unknown option '$1' for stop; valid: --purge" ;;
  esac
  # Cancel leftover jobs so that no slurmstepd or job process outlives slurmd.
  running "$RUN/slurmctld.pid" slurmctld && cancel_queue "cancelling jobs"
  stop_slurmds
  stop_pid slurmctld "$RUN/slurmctld.pid" slurmctld
  stop_pid slurmdbd "$RUN/slurmdbd.pid" slurmdbd
  stop_pid mariadbd "$RUN/mariadb.pid" mariadbd
  # Only a munged this script started; a system munged is not ours to stop.
  if [[ -s $RUN/munged.ours ]]; then
    stop_pid munged "$RUN/munged.ours" munged
  fi
  if ((purge)); then
    [[ $(readlink /etc/slurm/slurm.conf 2>/dev/null) == "$ETC/slurm.conf" ]] && rm -f /etc/slurm/slurm.conf
    rm -rf "$BASE"
    log "purged $BASE"
  fi
  log "stopped"
}

cmd_status() {
  use_configured_nodes
  local name comm file ok=0
  for name in munged mariadbd slurmdbd slurmctld "${NODE_NAMES[@]/#/slurmd }"; do
    case $name in
      munged) file=/run/munge/munged.pid comm=munged ;;
      mariadbd) file=$RUN/mariadb.pid comm=mariadbd ;;
      "slurmd "*)
        file=$(slurmd_pid "${name#slurmd }") comm=slurmd
        # a one-node cluster started before multi-node ones: its pid file has no node name
        [[ -s $file || ${#NODE_NAMES[@]} -gt 1 ]] || file=$RUN/slurmd.pid
        ;;
      *) file=$RUN/$name.pid comm=$name ;;
    esac
    if running "$file" "$comm"; then
      printf '%-12s running (pid %s)\n' "$name" "$(<"$file")"
    else
      printf '%-12s not running\n' "$name"
    fi
  done
  echo "SLURM_CONF=$SLURM_CONF"
  if sinfo -o '%12P %6a %5D %10T %8c %10m %12G %f' 2>/dev/null; then
    if sacct -n -X -S now >/dev/null 2>&1; then
      echo "sacct: ok (cluster $(sed -n 's/^ClusterName=//p' "$ETC/slurm.conf" 2>/dev/null), accounting through slurmdbd)"
    else
      echo "sacct: not answering"
      ok=1
    fi
  else
    echo "sinfo: slurmctld not answering"
    ok=1
  fi
  return $ok
}

cmd_env() {
  printf 'export SLURM_CONF=%q\n' "$SLURM_CONF"
  printf 'export LOCAL_SLURM_BASE=%q\n' "$BASE"
}

main() {
  local cmd=${1:-help}
  shift || true
  case $cmd in
    start) cmd_start ;;
    stop) cmd_stop "$@" ;;
    status) cmd_status ;;
    env) cmd_env ;;
    help | -h | --help) usage ;;
    *) die "unknown command '$cmd'; valid: start, stop, status, env, help" ;;
  esac
}

main "$@"
