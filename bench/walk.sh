#!/usr/bin/env bash
# The walk of one proxied HTTP/1.1 request through rebound's code (issue 49): gdb puts a
# breakpoint on every function of proxy/, rebound serves one keep-alive GET (upstream pool
# warmed by a first one) on one worker, and each function entered is logged in order. Prints
# how many stays (runs of entries in one file), rooms (files), climbs back up (a move to a
# folder above in scripts/check-includes' layer order) and entries of http/forward.cpp.
# A structure measure, not a timing: gdb makes the request ~1000x slower.
#   bench/walk.sh [REBOUND_BIN]      (default build/rebound; needs gdb, curl, python3)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build/rebound}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir "$work/www" && echo hello > "$work/www/x"
printf 'listen: 127.0.0.1:13128\nadmin: 127.0.0.1:19901\nworkers: 1\n' > "$work/rb.yaml"
(cd "$work/www" && exec python3 -m http.server 18081 --bind 127.0.0.1 >/dev/null 2>&1) &
"$bin" --config "$work/rb.yaml" >"$work/rebound.log" 2>&1 &
rb=$!
for _ in $(seq 50); do curl -s -o /dev/null http://127.0.0.1:19901/healthz && break; sleep 0.1; done
curl -s -o /dev/null -x http://127.0.0.1:13128 http://127.0.0.1:18081/x  # warms the upstream pool
WALK_OUT="$work/entries" WALK_FILES="$(ls proxy/*/*.cpp proxy/*/*/*.cpp)" WALK_READY="$work/ready" \
  gdb -q -batch -p "$rb" -x bench/walk_trace.py >"$work/gdb.log" 2>&1 &
g=$!
for _ in $(seq 600); do [ -f "$work/ready" ] && break; sleep 1; done
sleep 1
date +%s.%N >"$work/start"
curl -s -o /dev/null -x http://127.0.0.1:13128 http://127.0.0.1:18081/x
sleep 3  # the connection's end, after the answer
date +%s.%N >"$work/end"
kill "$rb"
wait "$g" || true
python3 bench/walk_count.py "$work/entries" "$(cat "$work/start")" "$(cat "$work/end")"
