#!/usr/bin/env bash
# The shared PostgreSQL store (issue 19) next to the embedded SQLite one, on 127.0.0.1: durable
# accepts/s and deliveries/s with 1 rebound on SQLite, 1 on PostgreSQL and 3 on one PostgreSQL
# database. wrk POSTs webhooks through rebound to a `context: webhook` dependency whose upstream
# is nginx answering 200; with 3 instances, three wrk share the connections, one per instance.
# The database is a throwaway server from Debian's PostgreSQL (initdb in a temp dir, fsync on,
# synchronous_commit on: a 202 means the task is on disk). Prints a Markdown report.
#
#   bench/fleet.sh                          # 64 connections, 10 s per configuration
#   BENCH_DURATION=30 bench/fleet.sh
#
# Deliveries/s: tasks nginx saw over the time from the first accept to the last delivery.
# Everything (wrk, nginx, PostgreSQL, every rebound) shares this machine's cores.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
DURATION=${BENCH_DURATION:-10}
CONNS=${BENCH_CONNECTIONS:-64}
REBOUND_BIN=${REBOUND_BIN:-$root/build/rebound}

log() { echo "bench: $*" >&2; }
die() { log "$*"; exit 1; }

"$root/scripts/install-deps" --bench
[[ -x $REBOUND_BIN ]] || "$root/scripts/build" >&2

tmp=$(mktemp -d "${TMPDIR:-/tmp}/rebound-fleet-bench.XXXXXX")
chmod 755 "$tmp"
declare -A pids=()
# shellcheck source=bench/proc.sh
source "$here/proc.sh"
pg_bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
as_pg() { if [[ $(id -u) -eq 0 ]]; then runuser -u nobody -- "$@"; else "$@"; fi; }
cleanup() {
  local name
  for name in "${!pids[@]}"; do stop_proc "$name" 5; done
  [[ -d $tmp/pg/data ]] && as_pg "$pg_bin/pg_ctl" -D "$tmp/pg/data" -m immediate -w stop >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT

PG_PORT=$(free_port)
mkdir -p "$tmp/pg"
[[ $(id -u) -eq 0 ]] && chown nobody "$tmp/pg"
as_pg "$pg_bin/initdb" -D "$tmp/pg/data" -U rebound -A trust -E UTF8 --locale=C --no-instructions >/dev/null
as_pg "$pg_bin/pg_ctl" -D "$tmp/pg/data" -l "$tmp/pg/server.log" -w \
  -o "-c listen_addresses=127.0.0.1 -p $PG_PORT -c unix_socket_directories=$tmp/pg -c max_connections=100" \
  start >/dev/null
psql_q() { psql -h 127.0.0.1 -p "$PG_PORT" -U rebound -d postgres -Atqc "$1"; }

NGINX_PORT=$(free_port)
start_nginx_app "$NGINX_PORT" "access_log $tmp/nginx/access.log bare buffer=64k flush=1s;" 'return 200 "ok\n";'

cat >"$tmp/post.lua" <<'EOF'
wrk.method = "POST"
wrk.body = '{"event":"invoice.paid","id":42}'
wrk.headers["Content-Type"] = "application/json"
done = function(summary, latency)
  io.write(string.format("REPORT requests=%d p50_us=%d duration_us=%d\n",
    summary.requests, latency:percentile(50), summary.duration))
end
EOF
field() { sed -n "s/.*$2=\([0-9]*\).*/\1/p" <<<"$1"; }
nginx_lines() { wc -l <"$tmp/nginx/access.log" 2>/dev/null || echo 0; }

# run_config NAME INSTANCES STORE_YAML: prints one Markdown row.
run_config() {
  local name=$1 n=$2 store=$3 i
  local ports=() admins=()
  for ((i = 0; i < n; i++)); do
    local port admin
    port=$(free_port)
    admin=$(free_port)
    cat >"$tmp/rebound-$i.yaml" <<EOF
listen: 127.0.0.1:$port
admin: 127.0.0.1:$admin
log_level: warn
store: $store
dependencies:
  hooks:
    hosts: ["127.0.0.1:$NGINX_PORT"]
    context: webhook
EOF
    "$REBOUND_BIN" --config "$tmp/rebound-$i.yaml" >"$tmp/rebound-$name-$i.log" 2>&1 &
    pids[rebound$i]=$!
    wait_port "rebound$i" "$port"
    for ((t = 0; t < 100; t++)); do
      [[ $(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$admin/readyz") == 200 ]] && break
      sleep 0.1
    done
    ports+=("$port")
    admins+=("$admin")
  done
  sleep 1.5
  local before
  before=$(nginx_lines)
  log "$name: wrk -c$CONNS for ${DURATION}s over $n instance(s)"
  local start_ms wrk_pids=()
  start_ms=$(date +%s%3N)
  for ((i = 0; i < n; i++)); do
    wrk -t1 -c$((CONNS / n)) -d"${DURATION}s" -s "$tmp/post.lua" -H "Host: 127.0.0.1:$NGINX_PORT" \
      "http://127.0.0.1:${ports[i]}/hook" >"$tmp/wrk-$i.txt" &
    wrk_pids+=($!)
  done
  wait "${wrk_pids[@]}"
  local accepted=0 reqs=0 dur=0 p50=0
  for ((i = 0; i < n; i++)); do
    local rep
    rep=$(grep '^REPORT' "$tmp/wrk-$i.txt")
    reqs=$((reqs + $(field "$rep" requests)))
    dur=$(field "$rep" duration_us)
    p50=$(field "$rep" p50_us)
    accepted=$((accepted + $(curl -s "http://127.0.0.1:${admins[i]}/metrics" |
      awk '/^proxy_requests_total\{/ && /code="202"/ {n += $NF} END {printf "%d", n}')))
  done
  for ((t = 0; t < 3000; t++)); do
    (($(nginx_lines) - before >= accepted)) && break
    sleep 0.1
  done
  local end_ms delivered
  end_ms=$(date +%s%3N)
  delivered=$(($(nginx_lines) - before))
  for ((i = 0; i < n; i++)); do stop_proc "rebound$i" 10; unset "pids[rebound$i]"; done
  echo "| $name | $((accepted * 1000000 / dur)) | $p50 | $((delivered * 1000 / (end_ms - start_ms))) | $accepted | $delivered |"
}

log "peer: wrk -c$CONNS straight to nginx for ${DURATION}s"
peer=$(wrk -t2 -c"$CONNS" -d"${DURATION}s" -s "$tmp/post.lua" "http://127.0.0.1:$NGINX_PORT/hook" | grep '^REPORT')
pg_store="{type: postgres, dsn: \"host=127.0.0.1 port=$PG_PORT dbname=postgres user=rebound\"}"

rows=()
rows+=("$(run_config "SQLite, 1 instance" 1 "{path: $tmp/rebound.db}")")
rows+=("$(run_config "PostgreSQL, 1 instance" 1 "$pg_store")")
psql_q "TRUNCATE retry_tasks CASCADE"
rows+=("$(run_config "PostgreSQL, 3 instances" 3 "$pg_store")")

cat <<EOF
## Async delivery on each store, $CONNS connections, ${DURATION}s per configuration ($(nproc) cores, all on this machine)

Peer: the same POSTs straight to nginx, $(($(field "$peer" requests) * 1000000 / $(field "$peer" duration_us))) req/s.

| configuration | durable accepts/s | accept p50 (us) | deliveries/s, first accept to last delivery | accepted | delivered |
|---|---|---|---|---|---|
$(printf '%s\n' "${rows[@]}")
EOF
