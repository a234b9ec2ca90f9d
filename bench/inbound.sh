#!/usr/bin/env bash
# Inbound idempotency (issue 18): what the gate adds per request. wrk POSTs JSON to an nginx app
# (`return 201`) four ways, each for BENCH_DURATION seconds, BENCH_ROUNDS rounds in turn:
#   direct   straight to nginx (the floor)
#   plain    through rebound's inbound listener on a path no route names (the plain reverse proxy)
#   stored   through a keyed route, a new key on every request: claim in the store, the app's
#            answer read whole, pinned (a second store call), answered
#   replayed through the keyed route, one key per wrk thread (pinned before the run): answered
#            from the store, the app not asked
# Prints a Markdown table of medians over the rounds (req/s, p50 and p99 latency) and the ratios
# against plain, the peer that shares everything but the gate.
#
#   bench/inbound.sh                                # 16 connections, 3 rounds of 5 s
#   BENCH_CONNECTIONS=64 BENCH_ROUNDS=5 bench/inbound.sh
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
DURATION=${BENCH_DURATION:-5}
CONNS=${BENCH_CONNECTIONS:-16}
THREADS=${BENCH_THREADS:-2}
ROUNDS=${BENCH_ROUNDS:-3}
REBOUND_BIN=${REBOUND_BIN:-$root/build/rebound}

log() { echo "bench: $*" >&2; }
die() { log "$*"; exit 1; }

"$root/scripts/install-deps" --bench
[[ -x $REBOUND_BIN ]] || "$root/scripts/build" >&2

tmp=$(mktemp -d "${TMPDIR:-/tmp}/rebound-inbound-bench.XXXXXX")
declare -A pids=()
# shellcheck source=bench/proc.sh
source "$here/proc.sh"
cleanup() {
  local name
  for name in "${!pids[@]}"; do stop_proc "$name" 5; done
  rm -rf "$tmp"
}
trap cleanup EXIT

APP=$(free_port)
start_nginx_app "$APP" "access_log off;" "default_type application/json; return 201 '{\"id\":\"rf_1\",\"status\":\"succeeded\"}';"

PORT=$(free_port)
ADMIN=$(free_port)
INBOUND=$(free_port)
cat >"$tmp/rebound.yaml" <<EOF
listen: 127.0.0.1:$PORT
admin: 127.0.0.1:$ADMIN
log_level: warn
store: {path: $tmp/rebound.db}
inbound:
  listen: 127.0.0.1:$INBOUND
  app: 127.0.0.1:$APP
  routes:
    - match: {path_prefix: /refunds, methods: [POST]}
      idempotency: {require: true}
EOF
"$REBOUND_BIN" --config "$tmp/rebound.yaml" >"$tmp/rebound.log" 2>&1 &
pids[rebound]=$!
wait_port rebound "$INBOUND"

# A key per request (stored) or per connection (replayed): thread id, connection, counter.
cat >"$tmp/keys.lua" <<'EOF'
-- `id` is a global each thread's Lua state gets from setup(); a local of that name would hide it.
local threads, counter = 0, 0
id = 0
function setup(thread) thread:set("id", threads); threads = threads + 1 end
local fresh = os.getenv("FRESH_KEYS") == "1"
function request()
  counter = counter + 1
  local key = fresh and ("k-" .. id .. "-" .. counter) or ("k-" .. id)
  return wrk.format("POST", "/refunds", {["Content-Type"] = "application/json", ["Idempotency-Key"] = key,
    ["Authorization"] = "Bearer bench"}, '{"charge":"ch_9ab","amount":1000}')
end
function done(summary, latency)
  io.write(string.format("REPORT requests=%d p50_us=%d p99_us=%d duration_us=%d errors=%d\n", summary.requests,
    latency:percentile(50), latency:percentile(99), summary.duration,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.status + summary.errors.timeout))
end
EOF
sed -e 's|"/refunds"|"/plain"|' "$tmp/keys.lua" >"$tmp/plain.lua"

run() {  # run NAME PORT SCRIPT [FRESH]
  FRESH_KEYS=${4:-0} wrk -t"$THREADS" -c"$CONNS" -d"${DURATION}s" -s "$3" "http://127.0.0.1:$2/" | grep '^REPORT'
}
field() { sed -n "s/.*$2=\([0-9]*\).*/\1/p" <<<"$1"; }
# The replayed run's keys (one per wrk thread) are pinned first, so no request of that run
# meets its key still in flight.
for ((t = 0; t < THREADS; t++)); do
  curl -sf -o /dev/null -X POST "http://127.0.0.1:$INBOUND/refunds" -H "Idempotency-Key: k-$t" \
    -H 'Authorization: Bearer bench' -H 'Content-Type: application/json' -d '{"charge":"ch_9ab","amount":1000}' ||
    die "could not pin the replayed run's key k-$t"
done
declare -A rps p50 p99
for ((r = 1; r <= ROUNDS; r++)); do
  for way in direct plain stored replayed; do
    case $way in
      direct) out=$(run direct "$APP" "$tmp/plain.lua") ;;
      plain) out=$(run plain "$INBOUND" "$tmp/plain.lua") ;;
      stored) out=$(run stored "$INBOUND" "$tmp/keys.lua" 1) ;;
      replayed) out=$(run replayed "$INBOUND" "$tmp/keys.lua" 0) ;;
    esac
    [[ $(field "$out" errors) == 0 ]] || die "$way: wrk saw errors: $out"
    rps[$way]+="$(($(field "$out" requests) * 1000000 / $(field "$out" duration_us))) "
    p50[$way]+="$(field "$out" p50_us) "
    p99[$way]+="$(field "$out" p99_us) "
    log "round $r $way: $out"
  done
done
median() { tr ' ' '\n' <<<"$1" | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
stored=$(curl -s "http://127.0.0.1:$ADMIN/metrics" |
  awk '/^idempotent_requests_total\{/ && /outcome="stored"/ {n += $NF} END {printf "%d", n}')
mp50=$(median "${p50[plain]}")
cat <<EOF
## Inbound idempotency, $CONNS connections, $ROUNDS rounds of ${DURATION}s ($(nproc) cores)

| way | req/s (median) | p50 latency | p99 latency | p50 over plain |
|---|---|---|---|---|
EOF
for way in direct plain stored replayed; do
  m=$(median "${p50[$way]}")
  printf '| %s | %s | %s us | %s us | %s |\n' "$way" "$(median "${rps[$way]}")" "$m" "$(median "${p99[$way]}")" \
    "$(awk -v a="$m" -v b="$mp50" 'BEGIN {printf "%.2f", a / b}')"
done
echo
echo "Keys pinned over the run (idempotent_requests_total{outcome=\"stored\"}): $stored"
