#!/usr/bin/env bash
# Async delivery on 127.0.0.1 (issue 17): how fast rebound makes handed-over calls durable and
# how fast it delivers them. wrk POSTs webhooks through rebound (origin-form with Host, the
# sidecar-by-DNS form) to a `context: webhook` dependency whose upstream is nginx answering 200;
# each call is committed to the SQLite store before its 202. Prints a Markdown report.
#
#   bench/async.sh                       # 64 connections, 10 s
#   BENCH_DURATION=30 BENCH_CONNECTIONS=128 bench/async.sh
#
# Accepts/s is wrk's rate of 202s; deliveries/s is the store's SUCCEEDED count over the time
# from the first accept until the last delivery (rebound's own log has a task_delivered per
# call). The same wrk against nginx directly is the peer that bounds what the machine does.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
DURATION=${BENCH_DURATION:-10}
CONNS=${BENCH_CONNECTIONS:-64}
THREADS=${BENCH_THREADS:-2}
WORKERS=${BENCH_WORKERS:-0}
REBOUND_BIN=${REBOUND_BIN:-$root/build/rebound}

log() { echo "bench: $*" >&2; }
die() { log "$*"; exit 1; }

"$root/scripts/install-deps" --bench
[[ -x $REBOUND_BIN ]] || "$root/scripts/build" >&2

tmp=$(mktemp -d "${TMPDIR:-/tmp}/rebound-async-bench.XXXXXX")
declare -A pids=()
# shellcheck source=bench/proc.sh
source "$here/proc.sh"
cleanup() {
  local name
  for name in "${!pids[@]}"; do stop_proc "$name" 5; done
  rm -rf "$tmp"
}
trap cleanup EXIT

NGINX_PORT=$(free_port)
start_nginx_app "$NGINX_PORT" "access_log $tmp/nginx/access.log bare buffer=64k flush=1s;" 'return 200 "ok\n";'

PORT=$(free_port)
ADMIN=$(free_port)
cat >"$tmp/rebound.yaml" <<EOF
listen: 127.0.0.1:$PORT
admin: 127.0.0.1:$ADMIN
workers: $WORKERS
log_level: warn
store: {path: $tmp/rebound.db}
dependencies:
  hooks:
    hosts: ["127.0.0.1:$NGINX_PORT"]
    context: webhook
EOF
"$REBOUND_BIN" --config "$tmp/rebound.yaml" >"$tmp/rebound.log" 2>&1 &
pids[rebound]=$!
wait_port rebound "$PORT"

cat >"$tmp/post.lua" <<'EOF'
wrk.method = "POST"
wrk.body = '{"event":"invoice.paid","id":42}'
wrk.headers["Content-Type"] = "application/json"
local accepted, other = 0, 0
function response(status) if status == 202 then accepted = accepted + 1 else other = other + 1 end end
done = function(summary, latency)
  io.write(string.format("REPORT requests=%d p50_us=%d p99_us=%d duration_us=%d\n",
    summary.requests, latency:percentile(50), latency:percentile(99), summary.duration))
end
EOF

log "peer: wrk -c$CONNS straight to nginx for ${DURATION}s"
peer=$(wrk -t"$THREADS" -c"$CONNS" -d"${DURATION}s" -s "$tmp/post.lua" "http://127.0.0.1:$NGINX_PORT/hook" | grep '^REPORT')
sleep 1.5  # nginx flushes its log each second
peer_lines=$(wc -l <"$tmp/nginx/access.log" 2>/dev/null || echo 0)
log "rebound: wrk -c$CONNS handing calls over for ${DURATION}s"
start_ms=$(date +%s%3N)
ours=$(wrk -t"$THREADS" -c"$CONNS" -d"${DURATION}s" -s "$tmp/post.lua" -H "Host: 127.0.0.1:$NGINX_PORT" \
  "http://127.0.0.1:$PORT/hook" | grep '^REPORT')
wrk_end_ms=$(date +%s%3N)
field() { sed -n "s/.*$2=\([0-9]*\).*/\1/p" <<<"$1"; }
# Calls made durable: rebound's own count of the 202s it answered.
accepted=$(curl -s "http://127.0.0.1:$ADMIN/metrics" |
  awk '/^proxy_requests_total\{/ && /code="202"/ {n += $NF} END {printf "%d", n}')
# Tasks that ended (delivered), live from rebound: each observes retry_task_age_seconds once.
ended() {
  curl -s "http://127.0.0.1:$ADMIN/metrics" |
    awk '/^retry_task_age_seconds_count\{/ {n += $NF} END {printf "%d", n}'
}
backlog_start=$(ended)
# The backlog left when the clients stopped drains with nothing else on the machine: deliveries
# alone, no accepts competing for the cores and the store's thread.
for ((i = 0; i < 1800; i++)); do
  (($(ended) >= accepted)) && break
  sleep 0.1
done
drain_ms=$(($(date +%s%3N) - wrk_end_ms))
drained=$((accepted - backlog_start))
delivered() { echo $(($(wc -l <"$tmp/nginx/access.log") - peer_lines)); }
# Wait until nginx has seen every accepted call (3 minutes at most; its log flushes each second).
for ((i = 0; i < 1800; i++)); do
  (($(delivered) >= accepted)) && break
  sleep 0.1
done
end_ms=$(date +%s%3N)
succeeded=$(delivered)
rss_kib=$(awk '$1 == "VmHWM:" {print $2}' "/proc/${pids[rebound]}/status")

req=$(field "$ours" requests)
dur=$(field "$ours" duration_us)
peer_req=$(field "$peer" requests)
peer_dur=$(field "$peer" duration_us)
cat <<EOF
## Async delivery, $CONNS connections, ${DURATION}s (workers: $WORKERS, $(nproc) cores)

| measure | value |
|---|---|
| durable accepts/s (202s, each committed before its answer) | $((req * 1000000 / dur)) |
| accept latency p50 / p99 | $(field "$ours" p50_us) us / $(field "$ours" p99_us) us |
| peer: the same POSTs straight to nginx, req/s | $((peer_req * 1000000 / peer_dur)) |
| calls accepted (202) | $accepted |
| calls delivered (nginx saw them) | $succeeded |
| deliveries/s, first accept to last delivery (includes up to 1 s of nginx log flush) | $(( succeeded * 1000 / (end_ms - start_ms) )) |
| deliveries/s draining the backlog left when the clients stopped ($drained tasks, rebound's own count) | $(( drained > 0 ? drained * 1000 / (drain_ms > 0 ? drain_ms : 1) : 0 )) |
| rebound peak RSS | $((rss_kib / 1024)) MiB |
EOF
