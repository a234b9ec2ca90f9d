#!/usr/bin/env bash
# gRPC unary calls (issue 21, issue 33): h2load (nghttp2-client) → {nginx | rebound → nginx |
# HAProxy → nginx}, every leg HTTP/2 over cleartext (h2c). HAProxy 2.6 does the same hop as
# rebound (`proto h2` on both sides), so the ratio that matters is rebound against it; the
# direct row is the ceiling. nginx answers every call like a gRPC server would: HTTP 200,
# content-type application/grpc, a 5-byte framed message and a `grpc-status: 0` trailer.
# BENCH_ROUNDS rounds alternate the targets (the order rotates each round); the report gives
# medians of calls/s, mean latency, and each proxy's CPU per 100k calls.
#
# Settings (environment): BENCH_DURATION=5 (s per run), BENCH_ROUNDS=3, BENCH_CLIENTS=16
# (h2load -c), BENCH_STREAMS=8 (h2load -m, concurrent calls per connection), BENCH_WORKERS=1
# (rebound workers = HAProxy nbthread), BENCH_BUILD=yes, REBOUND_BIN=build/rebound.
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
command -v haproxy >/dev/null || die "haproxy missing: scripts/install-deps --bench"

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

hap_port=$(free_port)
cat >"$tmp/haproxy.cfg" <<HAP
global
  nbthread $WORKERS
  maxconn 4096
defaults
  mode http
  timeout connect 5s
  timeout client 30s
  timeout server 30s
frontend grpc_in
  bind 127.0.0.1:$hap_port proto h2
  default_backend grpc_out
backend grpc_out
  http-reuse always
  server nginx 127.0.0.1:$up_port proto h2
HAP
haproxy -f "$tmp/haproxy.cfg" -db >"$tmp/haproxy.log" 2>&1 &
pids[haproxy]=$!
wait_port haproxy "$hap_port"

printf '\x00\x00\x00\x00\x05hello' >"$tmp/payload"
run_h2load() {  # run_h2load PORT OUT
  h2load -D "$DURATION" --warm-up-time 1 -c "$CLIENTS" -m "$STREAMS" -t 1 \
    -H ':authority: peer.test' -H 'content-type: application/grpc' -H 'te: trailers' \
    -d "$tmp/payload" "http://127.0.0.1:$1/bench.Svc/Unary" >"$2" 2>&1 || true
}
results=()
targets=(direct rebound haproxy)
for ((r = 1; r <= ROUNDS; r++)); do
  for ((i = 0; i < ${#targets[@]}; i++)); do
    target=${targets[$(((i + r - 1) % ${#targets[@]}))]}
    case $target in
      direct) port=$up_port; proxy= ;;
      rebound) port=$rb_port; proxy=${pids[rebound]} ;;
      haproxy) port=$hap_port; proxy=${pids[haproxy]} ;;
    esac
    before=0; [[ -n $proxy ]] && before=$(cpu_ticks "$proxy")
    run_h2load "$port" "$tmp/$target.$r.txt"
    after=0; [[ -n $proxy ]] && after=$(cpu_ticks "$proxy")
    rps=$(awk '/^finished in/ {gsub(",","",$4); print $4}' "$tmp/$target.$r.txt")
    ok=$(awk '/^requests:/ {print $8}' "$tmp/$target.$r.txt")
    bad=$(awk '/^status codes:/ {print $5+$7+$9}' "$tmp/$target.$r.txt")
    mean=$(awk '/^time for request:/ {print $6}' "$tmp/$target.$r.txt")
    [[ -n $rps ]] || { cat "$tmp/$target.$r.txt" >&2; die "h2load failed against $target"; }
    ((bad == 0)) || die "$target answered $bad calls with a non-2xx status (see $tmp/$target.$r.txt)"
    log "round $r $target: $rps calls/s, $ok succeeded, mean $mean, proxy CPU ticks $((after - before))"
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
rps = {t: med([r[0] for r in v]) for t, v in rows.items()}
cpu = {t: med([r[1] / tick / max(r[2], 1) * 1e5 for r in v]) for t, v in rows.items()}
def mean(t): return sorted(rows[t])[len(rows[t]) // 2][3]
print("| gRPC unary, h2c | calls/s (median) | mean latency (median run) | proxy CPU s / 100k calls |")
print("|---|---:|---:|---:|")
print("| h2load -> nginx (direct) | %s | %s | - |" % ("{:,.0f}".format(rps["direct"]), mean("direct")))
for t in ("rebound", "haproxy"):
    print("| h2load -> %s -> nginx | %s | %s | %.2f |" % (t, "{:,.0f}".format(rps[t]), mean(t), cpu[t]))
print()
print("rebound / HAProxy: %.2fx the calls/s, %.2fx the CPU per call; rebound / direct: %.2fx the calls/s" %
      (rps["rebound"] / rps["haproxy"], cpu["rebound"] / cpu["haproxy"], rps["rebound"] / rps["direct"]))
'
