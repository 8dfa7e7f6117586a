#!/usr/bin/env bash
# local-postgres.sh start|stop|status|url - a private PostgreSQL on 127.0.0.1 for the
# results-store tests of non-SQLite URLs. Debian's packages; runs as the postgres user
# (the server refuses root); everything under $LOCAL_PG_BASE.
set -euo pipefail
BASE=${LOCAL_PG_BASE:-${TMPDIR:-/tmp}/campaign-postgres}
PORT=${LOCAL_PG_PORT:-15432}
URL="postgresql+psycopg2://campaign:campaign@127.0.0.1:${PORT}/campaign"
log() { printf '[local-postgres] %s\n' "$*"; }
die() { log "ERROR: $*"; exit 1; }

bindir() {
  local d
  d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
  [[ -n $d ]] && echo "$d"
}

install_pkgs() {
  [[ -n $(bindir) ]] && return 0
  [[ $(id -u) == 0 ]] || die "PostgreSQL is not installed; as root: apt-get install postgresql"
  log "installing postgresql"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends postgresql >"$BASE.apt.log" 2>&1 \
    || { apt-get update -q >>"$BASE.apt.log" 2>&1 && apt-get install -y -q --no-install-recommends postgresql >>"$BASE.apt.log" 2>&1; } \
    || die "apt-get install postgresql failed (log: $BASE.apt.log)"
}

as_pg() { if [[ $(id -u) == 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi; }

running() { [[ -n $(bindir) ]] && as_pg "$(bindir)/pg_ctl" -D "$BASE/data" status >/dev/null 2>&1; }

start() {
  mkdir -p "$(dirname "$BASE")"
  install_pkgs
  local bin; bin=$(bindir)
  mkdir -p "$BASE"
  [[ $(id -u) == 0 ]] && chown postgres:postgres "$BASE"
  if [[ ! -s $BASE/data/PG_VERSION ]]; then
    as_pg "$bin/initdb" -D "$BASE/data" -U postgres --auth=trust >"$BASE/initdb.log" 2>&1 || die "initdb failed (log: $BASE/initdb.log)"
  fi
  if ! running; then
    as_pg "$bin/pg_ctl" -D "$BASE/data" -l "$BASE/server.log" -w -t 60 \
      -o "-c listen_addresses=127.0.0.1 -p $PORT -k $BASE -c fsync=off" start </dev/null >/dev/null \
      || die "server did not start (log: $BASE/server.log)"
  fi
  as_pg "$bin/psql" -h 127.0.0.1 -p "$PORT" -U postgres -d postgres -qtAc \
    "DO \$\$BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname='campaign') THEN CREATE ROLE campaign LOGIN CREATEDB PASSWORD 'campaign'; END IF; END\$\$; ALTER ROLE campaign CREATEDB;" >/dev/null
  if ! as_pg "$bin/psql" -h 127.0.0.1 -p "$PORT" -U postgres -d postgres -qtAc "SELECT 1 FROM pg_database WHERE datname='campaign'" | grep -q 1; then
    as_pg "$bin/createdb" -h 127.0.0.1 -p "$PORT" -U postgres -O campaign campaign
  fi
  log "ready: $URL"
}

stop() {
  running || { log "not running"; return 0; }
  as_pg "$(bindir)/pg_ctl" -D "$BASE/data" -m fast -w stop >/dev/null
  log "stopped"
}

case ${1:-} in
  start) start ;;
  stop) stop ;;
  status) running && log "running: $URL" || { log "not running"; exit 1; } ;;
  url) echo "$URL" ;;
  *) echo "usage: $0 start|stop|status|url" >&2; exit 2 ;;
esac
