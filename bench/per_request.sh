#!/usr/bin/env bash
# per_request.sh: what one proxied 1 KiB GET costs rebound in syscalls and heap allocations.
# wrk -> rebound -> nginx on 127.0.0.1, a warm-up, then one wrk run with the LD_PRELOAD
# allocation counter (bench/alloc_counter.c) reading the count before and after, and one
# under `strace -c -f` for the syscalls; both divided by wrk's request count.
# Usage: bench/per_request.sh [rebound binary] ; PERF_CONNS (64), PERF_THREADS (rebound
# workers, 1), PERF_DURATION (5 s), PERF_FORM (host: Host routing; proxy: absolute-form),
# PERF_BODY (the answer's size, 1024), PERF_POST (POSTs of this many bytes instead of GETs).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
BIN=$(realpath "${1:-build/rebound}")
CONNS=${PERF_CONNS:-64}; T=${PERF_THREADS:-1}; DUR=${PERF_DURATION:-5}; FORM=${PERF_FORM:-host}; POST=${PERF_POST:-}
for t in wrk nginx strace cc python3 curl; do
  command -v $t >/dev/null || { "$here/../scripts/install-deps" --bench; break; }
done
source "$here/one_hop.sh"
cc -O2 -shared -fPIC -o "$W/alloc_counter.so" "$here/alloc_counter.c" -lpthread
ALLOC_COUNT_FILE=$W/allocs LD_PRELOAD=$W/alloc_counter.so "$BIN" --config "$W/rebound.yaml" >"$W/rebound.log" 2>&1 &
pids+=($!); RBPID=$!
for _ in $(seq 50); do curl -s -o /dev/null -H "Host: bench.local" "http://127.0.0.1:$RB/" && break; sleep 0.1; done
if [[ $FORM == proxy ]]; then
  cat >"$W/proxy.lua" <<LUA
wrk.path = "http://bench.local/"
LUA
  load() { wrk -t2 -c"$CONNS" -d"$1"s -s "$W/proxy.lua" "http://127.0.0.1:$RB/"; }
elif [[ -n $POST ]]; then
  printf 'wrk.method = "POST"\nwrk.body = string.rep("x", %d)\n' "$POST" >"$W/post.lua"
  load() { wrk -t2 -c"$CONNS" -d"$1"s -H "Host: bench.local" -s "$W/post.lua" "http://127.0.0.1:$RB/post"; }
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
