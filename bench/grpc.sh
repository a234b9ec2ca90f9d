#!/usr/bin/env bash
# gRPC unary calls through rebound, against the same calls straight to the upstream (issue 21):
# h2load (nghttp2-client) → {nginx | rebound → nginx}, both legs HTTP/2 over cleartext (h2c).
# nginx answers every call like a gRPC server would: HTTP 200, content-type application/grpc,
# a 5-byte framed message and a `grpc-status: 0` trailer. BENCH_ROUNDS rounds alternate the
# targets; the report gives medians of calls/s, mean latency, and rebound's CPU per 100k calls.
#
# Settings (environment): BENCH_DURATION=5 (s per run), BENCH_ROUNDS=3, BENCH_CLIENTS=16
# (h2load -c), BENCH_STREAMS=8 (h2load -m, concurrent calls per connection), BENCH_WORKERS=1,
# BENCH_BUILD=yes, REBOUND_BIN=build/rebound.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
DURATION=${BENCH_DURATION:-5}
ROUNDS=${BENCH_ROUNDS:-3}
CLIENTS=${BENCH_CLIENTS:-16}
STREAMS=${BENCH_STREAMS:-8}
WORKERS=${BENCH_WORKERS:-1}
BUILD=${BENCH_BUILD:-yes}
REBOUND_BIN=${REBOUND_BIN:-$root/build/rebound}
export PATH=$PATH:/usr/sbin

log() { echo "[grpc-bench] $*" >&2; }
die() { log "$*"; exit 1; }
declare -A pids
# shellcheck source=bench/proc.sh
source "$here/proc.sh"
tmp=$(mktemp -d)
cleanup() { for n in "${!pids[@]}"; do stop_proc "$n" 2; done; rm -rf "$tmp"; }
trap cleanup EXIT

if [[ $BUILD == yes ]]; then
  "$root/scripts/install-deps" --bench >&2
  "$root/scripts/build" >&2
fi
command -v h2load >/dev/null || die "h2load missing: scripts/install-deps --bench"

up_port=$(free_port)
mkdir -p "$tmp/nginx"
cat >"$tmp/nginx/nginx.conf" <<NGINX
worker_processes 1;
pid $tmp/nginx/nginx.pid;
error_log $tmp/nginx/error.log;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $tmp/nginx;
  keepalive_requests 1000000000;
  server {
    listen 127.0.0.1:$up_port http2 backlog=4096;
    location / {
      default_type application/grpc;
      add_trailer grpc-status 0;
      return 200 "\x00\x00\x00\x00\x05hello";
    }
  }
}
NGINX
nginx -c "$tmp/nginx/nginx.conf" -g 'daemon off;' >"$tmp/nginx.log" 2>&1 &
pids[nginx]=$!
wait_port nginx "$up_port"

rb_port=$(free_port)
admin_port=$(free_port)
cat >"$tmp/rebound.yaml" <<YAML
listen: 127.0.0.1:$rb_port
admin: 127.0.0.1:$admin_port
workers: $WORKERS
log_level: warn
dependencies:
  peer:
    hosts: [peer.test]
    origin: http://127.0.0.1:$up_port
    context: grpc
YAML
"$REBOUND_BIN" --config "$tmp/rebound.yaml" >"$tmp/rebound.log" 2>&1 &
pids[rebound]=$!
wait_port rebound "$rb_port"

printf '\x00\x00\x00\x00\x05hello' >"$tmp/payload"
run_h2load() {  # run_h2load PORT OUT
  h2load -D "$DURATION" --warm-up-time 1 -c "$CLIENTS" -m "$STREAMS" -t 1 \
    -H ':authority: peer.test' -H 'content-type: application/grpc' -H 'te: trailers' \
    -d "$tmp/payload" "http://127.0.0.1:$1/bench.Svc/Unary" >"$2" 2>&1 || true
}
results=()
for ((r = 1; r <= ROUNDS; r++)); do
  for target in direct rebound; do
    port=$up_port
    [[ $target == rebound ]] && port=$rb_port
    before=$(cpu_ticks "${pids[rebound]}")
    run_h2load "$port" "$tmp/$target.$r.txt"
    after=$(cpu_ticks "${pids[rebound]}")
    rps=$(awk '/^finished in/ {gsub(",","",$4); print $4}' "$tmp/$target.$r.txt")
    ok=$(awk '/^requests:/ {print $8}' "$tmp/$target.$r.txt")
    bad=$(awk '/^status codes:/ {print $5+$7+$9}' "$tmp/$target.$r.txt")
    mean=$(awk '/^time for request:/ {print $6}' "$tmp/$target.$r.txt")
    [[ -n $rps ]] || { cat "$tmp/$target.$r.txt" >&2; die "h2load failed against $target"; }
    log "round $r $target: $rps calls/s, $ok succeeded, non-2xx $bad, mean $mean, rebound CPU ticks $((after - before))"
    results+=("$target $rps $((after - before)) $ok $mean")
  done
done
printf '%s\n' "${results[@]}" | python3 -c '
import sys, statistics, os
tick = os.sysconf("SC_CLK_TCK")
rows = {}
for line in sys.stdin:
    t, rps, ticks, ok, mean = line.split()
    rows.setdefault(t, []).append((float(rps), int(ticks), int(ok), mean))
def med(xs): return statistics.median(xs)
d = med([r[0] for r in rows["direct"]]); b = med([r[0] for r in rows["rebound"]])
cpu = med([r[1] / tick / max(r[2], 1) * 1e5 for r in rows["rebound"]])
print("| path | calls/s (median) | mean latency (median run) | rebound CPU s / 100k calls |")
print("|---|---:|---:|---:|")
print("| h2load -> nginx (direct) | %s | %s | - |" % (f"{d:,.0f}", sorted(rows["direct"])[len(rows["direct"])//2][3]))
print("| h2load -> rebound -> nginx | %s | %s | %.2f |" % (f"{b:,.0f}", sorted(rows["rebound"])[len(rows["rebound"])//2][3], cpu))
print()
print("rebound / direct: %.2fx the calls/s" % (b / d))
'
