#!/usr/bin/env bash
# Bounded soak test: rebound under long mixed load on 127.0.0.1, its memory and file descriptors
# sampled throughout. Prints a Markdown report on stdout (progress goes to stderr); exits 0 when
# RSS and fds stayed flat and rebound stayed alive and answers /healthz, 1 otherwise, 2 on bad
# arguments. See bench/README.md ("Soak: bench/soak.sh").
#
#   bench/soak.sh                      # 10 minutes
#   bench/soak.sh --duration 60        # or SOAK_DURATION=60 bench/soak.sh
#
# Settings (environment; --duration N overrides SOAK_DURATION):
#   SOAK_DURATION=600        seconds of load
#   SOAK_INTERVAL=10         seconds between samples (lowered so each third of the load has >= 3)
#   SOAK_SETTLE=15           seconds without load before the last sample (fds must be back by then)
#   SOAK_RATE=200            requests/s in total over all clients (0 = as fast as they can)
#   SOAK_CLIENTS=2           load-generator processes (python3), 9 threads each
#   SOAK_WORKERS=2           rebound `workers:`
#   SOAK_FAIL_RATIO=0.2      share of upstream answers that are 503 (half with Retry-After: 0)
#   SOAK_RESET_RATIO=0.01    share of requests the upstream resets before answering
#   SOAK_CLOSE_RATIO=0.03    share of upstream answers after which it closes the keep-alive connection
#   SOAK_UPSTREAM_IDLE=5     seconds the upstream keeps an idle keep-alive connection
#   SOAK_MAX_RETRY_BODY=512KiB  rebound's max_retry_body (uploads go up to 2 MiB, larger ones stream)
#   SOAK_LOG_LEVEL=info      rebound's log level (the log goes to a file in the temp dir)
#   SOAK_RSS_PCT=10 SOAK_RSS_SLACK_MIB=8 SOAK_FD_SLACK=4   the flatness rule (see the report)
#   SOAK_SEED=<random>       seed of the upstream's and the clients' random choices
#   SOAK_BUILD=yes           yes: build with scripts/build if REBOUND_BIN does not exist
#   REBOUND_BIN=build/rebound
#   SOAK_KEEP=0              1: keep the temp dir (config, logs, samples) even on success
#   SOAK_SIDE=auto           gRPC calls (some cancelled) and inbound keyed POSTs beside the load
#                            (bench/soak_side.sh): auto = when Debian's python3-grpcio is there
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")

DURATION=${SOAK_DURATION:-600}
while (($#)); do
  case $1 in
    --duration) [[ $# -ge 2 ]] || { echo "soak: --duration needs a value" >&2; exit 2; }; DURATION=$2; shift 2 ;;
    --duration=*) DURATION=${1#*=}; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "soak: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
INTERVAL=${SOAK_INTERVAL:-10}
SETTLE=${SOAK_SETTLE:-15}
RATE=${SOAK_RATE:-200}
CLIENTS=${SOAK_CLIENTS:-2}
WORKERS=${SOAK_WORKERS:-2}
FAIL_RATIO=${SOAK_FAIL_RATIO:-0.2}
RESET_RATIO=${SOAK_RESET_RATIO:-0.01}
CLOSE_RATIO=${SOAK_CLOSE_RATIO:-0.03}
UPSTREAM_IDLE=${SOAK_UPSTREAM_IDLE:-5}
MAX_RETRY_BODY=${SOAK_MAX_RETRY_BODY:-512KiB}
LOG_LEVEL=${SOAK_LOG_LEVEL:-info}
RSS_PCT=${SOAK_RSS_PCT:-10}
RSS_SLACK_MIB=${SOAK_RSS_SLACK_MIB:-8}
FD_SLACK=${SOAK_FD_SLACK:-4}
SEED=${SOAK_SEED:-$((RANDOM * 32768 + RANDOM))}
BUILD=${SOAK_BUILD:-yes}
KEEP=${SOAK_KEEP:-0}
SIDE=${SOAK_SIDE:-auto}
if [[ $SIDE == auto ]]; then
  SIDE=no
  /usr/bin/python3 -c 'import grpc' 2>/dev/null && SIDE=yes
fi
REBOUND_BIN=${REBOUND_BIN:-$root/build/rebound}

for v in DURATION INTERVAL SETTLE RATE CLIENTS WORKERS UPSTREAM_IDLE RSS_PCT RSS_SLACK_MIB FD_SLACK SEED; do
  [[ ${!v} =~ ^[0-9]+$ ]] || { echo "soak: SOAK_$v must be a non-negative integer, got '${!v}'" >&2; exit 2; }
done
for v in FAIL_RATIO RESET_RATIO CLOSE_RATIO; do
  [[ ${!v} =~ ^(0(\.[0-9]+)?|1(\.0+)?|\.[0-9]+)$ ]] || { echo "soak: SOAK_$v must be a number in 0..1, got '${!v}'" >&2; exit 2; }
done
((DURATION >= 9 && INTERVAL >= 1 && CLIENTS >= 1 && WORKERS >= 1)) ||
  { echo "soak: need DURATION >= 9, INTERVAL >= 1, CLIENTS >= 1, WORKERS >= 1" >&2; exit 2; }
# Each third of the load gets at least 3 samples.
interval_note=
if ((DURATION / INTERVAL < 9)); then
  interval_note=" (SOAK_INTERVAL=$INTERVAL lowered so each third of the load gets 3 samples)"
  INTERVAL=$((DURATION / 9))
fi

log() { printf 'soak: %s\n' "$*" >&2; }
die() { printf 'soak: FAILED: %s\n' "$*" >&2; exit 1; }

for tool in python3 curl; do command -v "$tool" >/dev/null || die "$tool is needed (apt-get install $tool)"; done
if [[ ! -x $REBOUND_BIN ]]; then
  if [[ $BUILD == yes ]]; then
    log "no binary at $REBOUND_BIN: building with scripts/install-deps and scripts/build"
    "$root/scripts/install-deps"
    "$root/scripts/build" >&2
  fi
  [[ -x $REBOUND_BIN ]] || die "no rebound binary at $REBOUND_BIN (build it with scripts/build)"
fi
REBOUND_BIN=$(cd "$(dirname "$REBOUND_BIN")" && pwd)/$(basename "$REBOUND_BIN")

# ---------------------------------------------------------------------------------------------
# Temp dir, process bookkeeping, cleanup
tmp=$(mktemp -d "${TMPDIR:-/tmp}/rebound-soak.XXXXXX")
# Run a private copy, so a rebuild during the soak cannot swap the binary mid-run.
cp "$REBOUND_BIN" "$tmp/rebound-under-test"
declare -A pids=()  # name -> pid of everything started and not yet stopped
# shellcheck source=bench/proc.sh
source "$here/proc.sh"  # stop_proc, free_port, wait_port, cpu_ticks
status=1

cleanup() {
  local rc=$? name
  trap - EXIT INT TERM
  for name in "${!pids[@]}"; do stop_proc "$name" 5; done
  if ((status != 0)); then
    rc=$((rc == 0 ? 1 : rc))
    for f in "$tmp"/*.log; do
      [[ -s $f ]] && { echo "----- tail of $f" >&2; tail -n 5 "$f" | cut -c1-400 >&2; }
    done
    echo "soak: temp dir kept for inspection: $tmp" >&2
  elif [[ $KEEP == 1 ]]; then
    echo "soak: temp dir kept: $tmp" >&2
  else
    rm -rf "$tmp"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

CLK_TCK=$(getconf CLK_TCK)

fd_kinds() {  # fd_kinds PID: "COUNT KIND" lines (socket, anon_inode:[eventpoll], pipe, file...)
  local f
  for f in /proc/"$1"/fd/*; do readlink "$f" 2>/dev/null || true; done |
    sed -E 's/^(socket|pipe):.*/\1/; s/^\/.*/file/; s/^anon_inode:\[?([a-z_]+)\]?.*/anon_inode:\1/' | sort | uniq -c
}

load_start=
sample() {  # sample PHASE: one line of samples.tsv for rebound
  local phase=$1 pid=${pids[rebound]} now t rss hwm thr fds ticks ndone
  now=$EPOCHREALTIME
  t=$(awk -v a="$now" -v b="${load_start:-$now}" 'BEGIN {printf "%.1f", a - b}')
  read -r rss hwm thr < <(awk '$1 == "VmRSS:" {r = $2} $1 == "VmHWM:" {h = $2} $1 == "Threads:" {t = $2}
                               END {print r, h, t}' "/proc/$pid/status") || return 1
  fds=$(find "/proc/$pid/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)
  ticks=$(cpu_ticks "$pid") || return 1
  ndone=$(cat "$tmp"/progress-* 2>/dev/null | awk '{s += $1} END {print s + 0}') || true
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$t" "$phase" "$rss" "$hwm" "$fds" "$thr" "$ticks" "$ndone" >>"$tmp/samples.tsv"
  log "t=${t}s $phase: RSS $((rss / 1024)) MiB (peak $((hwm / 1024))), fds $fds, threads $thr, requests done $ndone"
}

sleep_until() {  # sleep_until SECONDS_SINCE_LOAD_START
  local left
  left=$(awk -v s="$load_start" -v want="$1" -v now="$EPOCHREALTIME" 'BEGIN {d = s + want - now; printf "%.3f", (d > 0 ? d : 0)}')
  sleep "$left"
}

rebound_alive() { kill -0 "${pids[rebound]}" 2>/dev/null; }

# ---------------------------------------------------------------------------------------------
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
busy=$(pgrep -l -x 'cc1plus|ninja|make|ld|wrk|stress' 2>/dev/null | awk '{print $2}' | sort | uniq -c | awk '{printf "%s%s x%s", sep, $2, $1; sep=", "}' || true)
[[ -z $busy ]] || log "WARNING: other busy processes are running ($busy); CPU numbers will be noisy"
log "temp dir $tmp; duration ${DURATION}s, sample every ${INTERVAL}s$interval_note, settle ${SETTLE}s, rate $RATE/s, seed $SEED"

# The upstream picks its own port (no race) and writes it to a file.
python3 "$here/soak.py" upstream "$tmp/upstream.port" --fail-ratio "$FAIL_RATIO" --reset-ratio "$RESET_RATIO" \
  --close-ratio "$CLOSE_RATIO" --idle "$UPSTREAM_IDLE" --seed "$SEED" >"$tmp/upstream.log" 2>&1 &
pids[upstream]=$!
for ((i = 0; i < 100; i++)); do
  [[ -s $tmp/upstream.port ]] && break
  kill -0 "${pids[upstream]}" 2>/dev/null || die "the upstream exited during startup: $(tail -n 5 "$tmp/upstream.log")"
  sleep 0.1
done
UP_PORT=$(<"$tmp/upstream.port")
wait_port upstream "$UP_PORT"

side_yaml=
if [[ $SIDE == yes ]]; then
  /usr/bin/python3 "$root/integration/grpc_peer.py" server "$tmp/grpc.port" >"$tmp/grpc.log" 2>&1 &
  pids[grpc]=$!
  for ((i = 0; i < 100; i++)); do
    [[ -s $tmp/grpc.port ]] && break
    sleep 0.1
  done
  [[ -s $tmp/grpc.port ]] || die "the gRPC peer did not start: $(tail -n 5 "$tmp/grpc.log")"
  GRPC_PORT=$(<"$tmp/grpc.port")
  INBOUND_PORT=$(free_port)
  side_yaml="  soak-grpc:
    hosts: [grpc.soak]
    origin: http://127.0.0.1:$GRPC_PORT
    context: grpc
    routes:
      - match: {path_prefix: /test.Peer/Count}
        grpc_streaming: true
store: {path: $tmp/soak.db}
inbound:
  listen: 127.0.0.1:$INBOUND_PORT
  app: 127.0.0.1:$UP_PORT
  routes:
    - match: {path_prefix: /upload/keyed}
      idempotency: {require: true}"
fi

PROXY_PORT=$(free_port)
ADMIN_PORT=$(free_port)
cat >"$tmp/rebound.yaml" <<EOF
# bench/soak.sh: rebound in front of the scripted upstream, retries on.
listen: 127.0.0.1:$PROXY_PORT
admin: 127.0.0.1:$ADMIN_PORT
service: soak
log_level: $LOG_LEVEL
workers: $WORKERS
drain_timeout: 5s
unknown_hosts: deny
defaults:
  max_retries: 3
  backoff: {base: 2ms, cap: 50ms, jitter: full}
  total_timeout: 15s
  attempt_timeout: 5s
  max_retry_body: $MAX_RETRY_BODY
  budget: {ratio: 0.2, window: 10s, min_retries: 1000}    # the floor keeps retries going at this load
  circuit_breaker: {mode: signal}                         # tracked and logged, never refusing
dependencies:
  soak-upstream:
    hosts: ["127.0.0.1:$UP_PORT"]
    routes:
      - match: {path_prefix: /upload}
        attempt_timeout: 10s
      - match: {path_prefix: /backoff}                    # always 503: clients leave during the wait
        backoff: {base: 500ms, cap: 2s, jitter: decorrelated}
$side_yaml
EOF
"$tmp/rebound-under-test" check "$tmp/rebound.yaml" >"$tmp/check.out" 2>&1 ||
  die "rebound check refused the soak config: $(cat "$tmp/check.out")"
log "config: $(tail -n 1 "$tmp/check.out")"

"$tmp/rebound-under-test" --config "$tmp/rebound.yaml" >"$tmp/rebound.log" 2>"$tmp/rebound.stderr.log" &
pids[rebound]=$!
rebound_pid=${pids[rebound]}
wait_port rebound "$PROXY_PORT"
wait_port rebound "$ADMIN_PORT"
log "rebound pid $rebound_pid: proxy 127.0.0.1:$PROXY_PORT, admin 127.0.0.1:$ADMIN_PORT; upstream 127.0.0.1:$UP_PORT"

# A soak of error answers would prove nothing: one clean GET through the proxy must come back whole.
got=$(curl -sS --noproxy '' -x "http://127.0.0.1:$PROXY_PORT" --max-time 10 -H 'X-Soak-Fault: clean' \
        -o "$tmp/sanity.body" -w '%{http_code}' "http://127.0.0.1:$UP_PORT/get?size=1000&off=0") ||
  die "curl through rebound failed"
[[ $got == 200 && $(stat -c %s "$tmp/sanity.body") == 1000 ]] ||
  die "curl through rebound: HTTP $got, $(stat -c %s "$tmp/sanity.body") bytes; expected 200 and 1000"
log "verified: GET through rebound -> 200, 1000 bytes"

# ---------------------------------------------------------------------------------------------
# Idle baseline, then the load with samples every INTERVAL seconds, then SETTLE seconds of quiet.
sleep 1
load_start=$EPOCHREALTIME
sample idle
fd_kinds "${pids[rebound]}" >"$tmp/fd-kinds-idle.txt"

threads_scale=1
for ((c = 0; c < CLIENTS; c++)); do
  python3 "$here/soak.py" load --proxy "$PROXY_PORT" --upstream "$UP_PORT" --duration "$DURATION" \
    --rate "$(awk -v r="$RATE" -v n="$CLIENTS" 'BEGIN {printf "%.3f", r / n}')" --threads-scale "$threads_scale" \
    --out "$tmp/load-$c.json" --progress "$tmp/progress-$c" --seed $((SEED + c + 1)) >"$tmp/load-$c.log" 2>&1 &
  pids[load-$c]=$!
done

if [[ $SIDE == yes ]]; then
  "$here/soak_side.sh" "$PROXY_PORT" "$INBOUND_PORT" $(($(date +%s) + DURATION)) "$tmp/side.txt" >"$tmp/side.log" 2>&1 &
  pids[side]=$!
fi

clients_running() {
  local c
  for ((c = 0; c < CLIENTS; c++)); do
    [[ -n ${pids[load-$c]:-} ]] && kill -0 "${pids[load-$c]}" 2>/dev/null && return 0
  done
  return 1
}

death=
next=$INTERVAL
while ((next <= DURATION)); do
  sleep_until "$next"
  if ! rebound_alive; then death="rebound exited during the load, about ${next}s in"; break; fi
  sample load || { death="rebound vanished while being sampled, about ${next}s in"; break; }
  next=$((next + INTERVAL))
done

# The clients stop issuing at DURATION and finish the request in hand (a 30 s client timeout at most).
for ((i = 0; i < 600; i++)); do
  clients_running || break
  [[ -z $death ]] || break
  sleep 0.1
done
for ((c = 0; c < CLIENTS; c++)); do
  if [[ -n $death ]]; then
    stop_proc "load-$c" 40  # SIGTERM: it stops and writes what it saw (a 30 s client timeout at most)
  else
    stop_proc "load-$c" 5
    [[ $stop_rc == 0 ]] || die "load generator $c failed (exit $stop_rc): $(tail -n 5 "$tmp/load-$c.log")"
    [[ -s $tmp/load-$c.json ]] || die "load generator $c wrote no result: $(tail -n 5 "$tmp/load-$c.log")"
  fi
done
# The side loads end at DURATION too, after the batch in hand.
[[ $SIDE == yes ]] && stop_proc side 30
load_end=$(awk -v s="$load_start" -v now="$EPOCHREALTIME" 'BEGIN {printf "%d", now - s + 0.999}')

if [[ -z $death ]]; then
  log "load finished; ${SETTLE}s without load"
  settle_step=$((INTERVAL < 5 ? INTERVAL : 5))
  for ((next = load_end + settle_step; next < load_end + SETTLE; next += settle_step)); do
    sleep_until "$next"
    rebound_alive || { death="rebound exited after the load, while settling"; break; }
    sample settle || { death="rebound vanished while being sampled after the load"; break; }
  done
fi
if [[ -z $death ]]; then
  sleep_until $((load_end + SETTLE))
  if rebound_alive && sample settle; then
    fd_kinds "${pids[rebound]}" >"$tmp/fd-kinds-end.txt"
  else
    death="rebound exited after the load, while settling"
  fi
fi

# ---------------------------------------------------------------------------------------------
# Is it alive and healthy; what do its metrics and the upstream say; does it drain on SIGTERM.
alive=no healthz="" drain_rc=""
if [[ -z $death ]] && rebound_alive; then
  alive=yes
  h=$(curl -sS --noproxy '*' --max-time 5 -w ' %{http_code}' "http://127.0.0.1:$ADMIN_PORT/healthz" 2>&1 | tr -d '\r\n') || true
  healthz="${h##* } ${h% *}"
  curl -sS --noproxy '*' --max-time 10 -o "$tmp/metrics.txt" "http://127.0.0.1:$ADMIN_PORT/metrics" ||
    log "WARNING: /metrics could not be scraped"
  curl -sS --noproxy '*' --max-time 10 -o "$tmp/dependencies.json" "http://127.0.0.1:$ADMIN_PORT/dependencies" || true
fi
curl -sS --noproxy '*' --max-time 10 -o "$tmp/upstream-stats.json" "http://127.0.0.1:$UP_PORT/__stats" ||
  log "WARNING: the upstream's counters could not be fetched"
if [[ -n ${pids[rebound]:-} ]]; then
  if [[ $alive == yes ]]; then
    stop_proc rebound 15
    drain_rc=$stop_rc
  else
    rc=0
    wait "${pids[rebound]}" 2>/dev/null || rc=$?
    unset "pids[rebound]"
    death+=" (exit status $rc$( ((rc > 128)) && echo ", signal $((rc - 128))"))"
    log "$death"
  fi
fi
stop_proc upstream 5
[[ $SIDE == yes ]] && stop_proc grpc 5

# Log events: count per event name, keep the first lines of anything that means a bug.
python3 - "$tmp/rebound.log" "$tmp/log-events.tsv" "$tmp/log-bad-lines.txt" <<'EOF'
import collections, json, sys
counts, bad = collections.Counter(), []
with open(sys.argv[1], errors="replace") as f:
    for line in f:
        try:
            ev = json.loads(line).get("event", "?")
        except ValueError:
            ev = "(not JSON)"
        counts[ev] += 1
        if ev in ("internal_error", "accept_failed", "startup_failed", "(not JSON)") and len(bad) < 10:
            bad.append(line.rstrip("\n")[:600])
with open(sys.argv[2], "w") as f:
    for ev, n in counts.most_common():
        f.write(f"{n}\t{ev}\n")
with open(sys.argv[3], "w") as f:
    f.write("\n".join(bad))
EOF

rev=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo "no commit")
if ! git -C "$root" diff --quiet HEAD -- 2>/dev/null; then rev+=" + uncommitted changes"; fi
build_dir=$(dirname "$REBOUND_BIN")
build_type=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$build_dir/CMakeCache.txt" 2>/dev/null || true)
{
  printf 'date\t%s\n' "$(date -u '+%Y-%m-%d %H:%M UTC')"
  printf 'uname\t%s\n' "$(uname -sr)"
  printf 'ncpu\t%s\n' "$(nproc)"
  printf 'load_before\t%s\n' "$load_before"
  printf 'busy\t%s\n' "$busy"
  printf 'version\t%s\n' "$("$tmp/rebound-under-test" --version 2>/dev/null | head -n 1)"
  printf 'rev\t%s\n' "$rev"
  printf 'build\t%s\n' "${build_type:-default} build"
  printf 'workers\t%s\n' "$WORKERS"
  printf 'log_level\t%s\n' "$LOG_LEVEL"
  printf 'clients\t%s\n' "$CLIENTS"
  printf 'rate\t%s\n' "$RATE"
  printf 'duration\t%s\n' "$DURATION"
  printf 'interval\t%s\n' "$INTERVAL"
  printf 'settle\t%s\n' "$SETTLE"
  printf 'seed\t%s\n' "$SEED"
  printf 'fail_ratio\t%s\n' "$FAIL_RATIO"
  printf 'reset_ratio\t%s\n' "$RESET_RATIO"
  printf 'close_ratio\t%s\n' "$CLOSE_RATIO"
  printf 'upstream_idle\t%s\n' "$UPSTREAM_IDLE"
  printf 'max_retry_body\t%s\n' "$MAX_RETRY_BODY"
  printf 'rss_pct\t%s\n' "$RSS_PCT"
  printf 'rss_slack_mib\t%s\n' "$RSS_SLACK_MIB"
  printf 'fd_slack\t%s\n' "$FD_SLACK"
  printf 'clk_tck\t%s\n' "$CLK_TCK"
  printf 'pid\t%s\n' "$rebound_pid"
  printf 'alive\t%s\n' "$alive"
  printf 'death\t%s\n' "$death"
  printf 'healthz\t%s\n' "$healthz"
  printf 'drain_rc\t%s\n' "$drain_rc"
} >"$tmp/meta.tsv"

report_rc=0
python3 "$here/soak.py" report "$tmp" || report_rc=$?
if [[ $SIDE == yes && -s $tmp/side.txt ]]; then
  echo
  echo "### Side loads (bench/soak_side.sh): batches by outcome"
  echo
  echo "gRPC codes as grpcio saw them (cancelled calls end CANCELLED, code 1); inbound HTTP statuses."
  echo
  echo '| batches | kind and outcome |'
  echo '|---:|---|'
  sort "$tmp/side.txt" | uniq -c | sort -rn | awk '{printf "| %s | `%s %s` |\n", $1, $2, $3}'
fi
if ((report_rc == 0)); then
  status=0
else
  status=1
  log "the soak failed (report above); temp dir kept"
fi
exit "$report_rc"
