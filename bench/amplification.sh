#!/usr/bin/env bash
# Retry amplification across layers (issue 22): three chained rebound hops in front of an nginx
# that answers every request 503. A client calls hop 3, which calls hop 2, which calls hop 1,
# which calls nginx. Every hop has `max_retries: 3`, fast backoff, and a budget and breaker that
# stay out of the way (min_retries 1000000, breaker off), so what is counted is the retries
# alone. Each setup starts three fresh rebounds; nginx's access log counts the calls that
# reached it. Prints a Markdown table: calls that reached the upstream per client request.
#
#   before   `retry_layered: true` on every hop: each layer retries what the one below gave up on
#   after    the default (`retry_layered: false`): only the bottom hop retries
#
# usage: bench/amplification.sh [REQUESTS]       (default 50; REBOUND_BIN=build/rebound)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
REQUESTS=${1:-50}
REBOUND_BIN=${REBOUND_BIN:-$root/build/rebound}
LAYERS=3
MAX_RETRIES=3
export PATH="$PATH:/usr/sbin:/sbin"

[[ $REQUESTS =~ ^[1-9][0-9]*$ ]] || { echo "amplification: REQUESTS must be a positive integer" >&2; exit 2; }
[[ -x $REBOUND_BIN ]] || { echo "amplification: no rebound binary at $REBOUND_BIN (scripts/build first)" >&2; exit 2; }
for tool in nginx curl python3; do
  command -v "$tool" >/dev/null || { echo "amplification: $tool is needed" >&2; exit 2; }
done

tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_ready() {  # wait_ready URL: until it answers 200 (10 s at most)
  for _ in $(seq 100); do
    [[ $(curl -s -o /dev/null -w '%{http_code}' "$1" || true) == 200 ]] && return 0
    sleep 0.1
  done
  echo "amplification: $1 never became ready" >&2
  exit 1
}

# nginx: answers 503 to everything and logs one line per request that reached it.
NGINX_PORT=$(free_port)
mkdir -p "$tmp/nginx"
chmod 755 "$tmp" "$tmp/nginx"  # nginx workers drop to `nobody` when started as root
temp_paths="client_body_temp_path $tmp/nginx/client_body;"
for m in proxy fastcgi uwsgi scgi; do
  nginx -V 2>&1 | grep -q -- "--without-http_${m}_module" || temp_paths+=$'\n'"  ${m}_temp_path $tmp/nginx/$m;"
done
cat >"$tmp/nginx/nginx.conf" <<EOF
worker_processes 1;
daemon off;
pid $tmp/nginx/nginx.pid;
error_log $tmp/nginx/error.log warn;
events { worker_connections 1024; }
http {
  $temp_paths
  log_format calls "\$request";
  access_log $tmp/nginx/access.log calls;
  server {
    listen 127.0.0.1:$NGINX_PORT;
    location / { return 503 "down\n"; }
  }
}
EOF
nginx -p "$tmp/nginx" -e "$tmp/nginx/error.log" -c "$tmp/nginx/nginx.conf" >"$tmp/nginx.out" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  [[ $(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$NGINX_PORT/" || true) == 503 ]] && break
  sleep 0.1
done

# run_setup SLUG NAME POLICY_LINES: starts the chain, sends the requests, prints a table row.
run_setup() {
  local slug=$1 name=$2 policy=$3 next=$NGINX_PORT hop_pids=() port admin
  for i in $(seq 1 $LAYERS); do
    port=$(free_port)
    admin=$(free_port)
    cat >"$tmp/$slug-hop$i.yaml" <<EOF
listen: 127.0.0.1:$port
admin: 127.0.0.1:$admin
workers: 1
log_level: error
defaults:
  max_retries: $MAX_RETRIES
  backoff: {base: 1ms, cap: 5ms}
  budget: {min_retries: 1000000}
  circuit_breaker: {mode: 'off'}
$policy
dependencies:
  svc:
    hosts: [svc.test]
    origin: http://127.0.0.1:$next
EOF
    "$REBOUND_BIN" --config "$tmp/$slug-hop$i.yaml" >"$tmp/$slug-hop$i.log" 2>&1 &
    hop_pids+=($!)
    pids+=($!)
    wait_ready "http://127.0.0.1:$admin/readyz"
    next=$port
  done
  : >"$tmp/nginx/access.log"
  local before_lines answered=0 start end
  before_lines=$(wc -l <"$tmp/nginx/access.log")
  start=$(date +%s.%N)
  for _ in $(seq "$REQUESTS"); do
    code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 60 -x "http://127.0.0.1:$next" http://svc.test/x || true)
    [[ $code == 503 ]] && answered=$((answered + 1))
  done
  end=$(date +%s.%N)
  local calls=$(($(wc -l <"$tmp/nginx/access.log") - before_lines))
  for p in "${hop_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${hop_pids[@]}"; do wait "$p" 2>/dev/null || true; done
  python3 - "$name" "$REQUESTS" "$calls" "$answered" "$start" "$end" <<'PY'
import sys
name, n, calls, answered, start, end = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6])
print(f"| {name} | {n} | {calls} | {calls / n:.2f} | {answered} | {(end - start) * 1000 / n:.1f} ms |")
PY
}

echo "Three rebound hops, max_retries: $MAX_RETRIES each, in front of an upstream that answers 503."
echo
echo "| setup | client requests | calls at the upstream | per client request | answered 503 | time per request |"
echo "|---|---:|---:|---:|---:|---:|"
run_setup before "before (\`retry_layered: true\`)" "  retry_layered: true"
run_setup after "after (default)" ""
