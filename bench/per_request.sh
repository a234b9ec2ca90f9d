#!/usr/bin/env bash
# per_request.sh: what one proxied 1 KiB GET costs rebound in syscalls and heap allocations.
# wrk -> rebound -> nginx on 127.0.0.1, a warm-up, then one wrk run with the LD_PRELOAD
# allocation counter (bench/alloc_counter.c) reading the count before and after, and one
# under `strace -c -f` for the syscalls; both divided by wrk's request count.
# Usage: bench/per_request.sh [rebound binary] ; PERF_CONNS (64), PERF_THREADS (rebound
# workers, 1), PERF_DURATION (5 s), PERF_FORM (host: Host routing; proxy: absolute-form).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
BIN=$(realpath "${1:-build/rebound}")
CONNS=${PERF_CONNS:-64}; T=${PERF_THREADS:-1}; DUR=${PERF_DURATION:-5}; FORM=${PERF_FORM:-host}
for t in wrk nginx strace cc python3 curl; do
  command -v $t >/dev/null || { "$here/../scripts/install-deps" --bench; break; }
done
W=$(mktemp -d); chmod 755 "$W"; pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$W"; }
trap cleanup EXIT
port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
NG=$(port); RB=$(port); RBA=$(port)
cc -O2 -shared -fPIC -o "$W/alloc_counter.so" "$here/alloc_counter.c" -lpthread
mkdir -p "$W/html" "$W/ng"; head -c 1024 /dev/zero | tr '\0' x >"$W/html/index.html"
cat >"$W/nginx.conf" <<NG
worker_processes 1; daemon off; pid $W/ng/pid; error_log $W/ng/err.log;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 1000000; client_body_temp_path $W/ng; proxy_temp_path $W/ng;
  fastcgi_temp_path $W/ng; uwsgi_temp_path $W/ng; scgi_temp_path $W/ng;
  server { listen 127.0.0.1:$NG; root $W/html; location / { index index.html; } } }
NG
cat >"$W/rebound.yaml" <<RBY
listen: 127.0.0.1:$RB
admin: 127.0.0.1:$RBA
service: bench
workers: $T
dependencies:
  bench:
    hosts: [bench.local]
    origin: http://127.0.0.1:$NG
RBY
nginx -c "$W/nginx.conf" -p "$W" >/dev/null 2>&1 & pids+=($!)
ALLOC_COUNT_FILE=$W/allocs LD_PRELOAD=$W/alloc_counter.so "$BIN" --config "$W/rebound.yaml" >"$W/rebound.log" 2>&1 &
pids+=($!); RBPID=$!
for _ in $(seq 50); do curl -s -o /dev/null -H "Host: bench.local" "http://127.0.0.1:$RB/" && break; sleep 0.1; done
if [[ $FORM == proxy ]]; then
  cat >"$W/proxy.lua" <<LUA
wrk.path = "http://bench.local/"
LUA
  load() { wrk -t2 -c"$CONNS" -d"$1"s -s "$W/proxy.lua" "http://127.0.0.1:$RB/"; }
else
  load() { wrk -t2 -c"$CONNS" -d"$1"s -H "Host: bench.local" "http://127.0.0.1:$RB/"; }
fi
requests() { awk '/requests in/ {print $1}'; }
load 2 >/dev/null
sleep 0.3; a0=$(cat "$W/allocs"); n=$(load "$DUR" | requests); sleep 0.3; a1=$(cat "$W/allocs")
timeout $((DUR + 3)) strace -f -c -p "$RBPID" -o "$W/strace" 2>/dev/null & st=$!
sleep 0.5; ns=$(load "$DUR" | requests); wait $st || true
python3 - "$n" "$a0" "$a1" "$ns" "$W/strace" "$CONNS" "$T" "$FORM" <<'PY'
import sys
n, a0, a1, ns = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
calls = {}
for line in open(sys.argv[5]):
    p = line.split()
    # The counter's reporter thread opens, writes, renames, closes and sleeps; requests do not.
    if len(p) >= 5 and p[0][0].isdigit() and p[-1] not in ("total", "openat", "write", "close", "rename", "clock_nanosleep"):
        calls[p[-1]] = int(p[3])
total = sum(calls.values())
top = ", ".join("%s %.2f" % (k, v / ns) for k, v in sorted(calls.items(), key=lambda kv: -kv[1]) if v / ns >= 0.01)
print("%d conns, %d workers, %s-form: %.1f allocations per request (%d requests); %.2f syscalls per request: %s"
      % (int(sys.argv[6]), int(sys.argv[7]), sys.argv[8], (a1 - a0) / max(n, 1), n, total / max(ns, 1), top))
PY
