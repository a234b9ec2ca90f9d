#!/usr/bin/env bash
# instructions.sh: user-space instructions per proxied 1 KiB GET, rebound next to HAProxy, counted
# by valgrind's callgrind. wrk -> {rebound | haproxy} -> nginx on 127.0.0.1; each proxy runs
# under callgrind with instrumentation off, gets a warm-up, then counts while wrk sends requests
# for PERF_DURATION seconds; the count is divided by wrk's requests.
#
# Why: CPU seconds per request from /proc swing 5-15% between runs of one binary on a shared
# 2-core machine, more than most levers move; an instruction count for the same binary and
# load shape repeats within ~0.5% at one connection. It sees user space only (the kernel's half
# of the cost is syscalls, counted by bench/per_request.sh), and it is not time: use it to A/B a
# lever, and quote CPU from bench/run.sh and ../shared/bench/side-by-side.sh beside it.
#
# Usage: bench/instructions.sh [rebound binary]
#   PERF_CONNS=1 (wrk -c; 1 repeats best, more adds epoll batching, which varies with load)
#   PERF_DURATION=10, PERF_FORM=host|proxy (Host routing, or absolute-form as HTTP_PROXY sends),
#   PERF_PEER=haproxy|none, PERF_KEEP=DIR (keep the callgrind files there, for callgrind_annotate),
#   PERF_BODY=bytes (the answer's size, 1024), PERF_POST=bytes (POSTs of this size instead of GETs)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
BIN=$(realpath "${1:-build/rebound}")
CONNS=${PERF_CONNS:-1}; DUR=${PERF_DURATION:-10}; FORM=${PERF_FORM:-host}; PEER=${PERF_PEER:-haproxy}
POST=${PERF_POST:-}
for t in wrk nginx haproxy valgrind callgrind_control python3 curl; do
  command -v $t >/dev/null || { "$here/../scripts/install-deps" --bench; break; }
done
T=1  # one rebound worker, as HAProxy has one thread
source "$here/one_hop.sh"
HA=$(port)
# bench/run.sh's HAProxy: the same forward-proxy job (origin-form rewrite, Via, reuse), one thread.
cat >"$W/haproxy.cfg" <<HAC
global
  nbthread 1
defaults
  mode http
  option http-keep-alive
  timeout connect 5s
  timeout client 60s
  timeout server 60s
frontend forward_proxy
  bind 127.0.0.1:$HA
  http-request set-uri %[pathq]
  http-request add-header Via "1.1 haproxy"
  default_backend origin
backend origin
  http-reuse always
  server nginx 127.0.0.1:$NG
HAC
if [[ $FORM == proxy ]]; then
  printf 'wrk.path = "http://bench.local/"\n' >"$W/proxy.lua"
  # Host as an HTTP_PROXY client sends it: the URL's authority (HAProxy answers 400 to a mismatch).
  load() { wrk -t1 -c"$CONNS" -d"$2"s -H "Host: bench.local" -s "$W/proxy.lua" "http://127.0.0.1:$1/"; }
elif [[ -n $POST ]]; then
  printf 'wrk.method = "POST"\nwrk.body = string.rep("x", %d)\n' "$POST" >"$W/post.lua"
  load() { wrk -t1 -c"$CONNS" -d"$2"s -H "Host: bench.local" -s "$W/post.lua" "http://127.0.0.1:$1/post"; }
else
  load() { wrk -t1 -c"$CONNS" -d"$2"s -H "Host: bench.local" "http://127.0.0.1:$1/"; }
fi
count() {  # count NAME PORT COMMAND...: instructions per request of COMMAND's process
  local name=$1 p=$2; shift 2
  valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$W/$name.cg" "$@" >"$W/$name.log" 2>&1 &
  local vg=$!; pids+=($vg)
  for _ in $(seq 100); do curl -s -o /dev/null -H "Host: bench.local" "http://127.0.0.1:$p/" && break; sleep 0.3; done
  load "$p" 3 >/dev/null
  callgrind_control -i on "$vg" >/dev/null 2>&1
  local out n; out=$(load "$p" "$DUR"); n=$(echo "$out" | awk "/requests in/ {print \$1}")
  if echo "$out" | grep -q "Non-2xx"; then echo "$name answered errors: $(echo "$out" | grep Non-2xx)" >&2; exit 1; fi
  callgrind_control -d "$vg" >/dev/null 2>&1
  sleep 1
  local ir; ir=$(cat "$W/$name.cg".* | awk '/^summary:/ {print $2}' | head -1)
  if [[ -n ${PERF_KEEP:-} ]]; then mkdir -p "$PERF_KEEP" && cp "$W/$name.cg".* "$PERF_KEEP/"; fi
  kill "$vg" 2>/dev/null || true
  echo "$name $n $ir"
}
{
  # rebound starts itself again to set glibc's cache depth (proxy/main.cpp), which valgrind
  # would not follow; set here, it has what it wants and does not.
  GLIBC_TUNABLES=${GLIBC_TUNABLES:-glibc.malloc.tcache_count=64} count rebound "$RB" "$BIN" --config "$W/rebound.yaml"
  if [[ $PEER == haproxy ]]; then count haproxy "$HA" haproxy -db -f "$W/haproxy.cfg"; fi
} >"$W/counts"
python3 - "$W/counts" "$CONNS" "$FORM" <<'PY'
import sys
rows = {}
for line in open(sys.argv[1]):
    name, n, ir = line.split()
    rows[name] = int(ir) / max(int(n), 1)
print("%s conns, %s-form: user-space instructions per request: %s" % (
    sys.argv[2], sys.argv[3], ", ".join("%s %.0f" % kv for kv in rows.items())))
if "haproxy" in rows:
    print("rebound/haproxy %.2f" % (rows["rebound"] / rows["haproxy"]))
PY
