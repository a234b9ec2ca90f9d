#!/usr/bin/env bash
# One-hop forward-proxy benchmark on 127.0.0.1: wrk → {nginx | rebound → nginx | haproxy → nginx}.
# Prints a Markdown report on stdout (progress goes to stderr). See bench/README.md.
#
# Settings (environment):
#   BENCH_DURATION=10        seconds per measured wrk run
#   BENCH_ROUNDS=3           rounds; each round runs every target once (order rotates per round)
#   BENCH_WARMUP=2           seconds of unrecorded wrk per target before round 1 (0 = none)
#   BENCH_CONNECTIONS=64     wrk -c
#   BENCH_THREADS=2          wrk -t
#   BENCH_WORKERS=1          rebound `workers:` and haproxy `nbthread` (0 = one per core for both)
#   BENCH_IDLE=1000          idle client connections for the memory measurement (0 = skip)
#   BENCH_BODY_BYTES=1024    size of the static body nginx serves
#   BENCH_BUILD=yes          yes: scripts/install-deps + scripts/build first (a no-op when up to date);
#                            no: use REBOUND_BIN as it is
#   REBOUND_BIN=build/rebound
#   BENCH_KEEP=0             1: keep the temp dir (configs, logs, raw wrk output) even on success
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")

DURATION=${BENCH_DURATION:-10}
ROUNDS=${BENCH_ROUNDS:-3}
WARMUP=${BENCH_WARMUP:-2}
CONNS=${BENCH_CONNECTIONS:-64}
THREADS=${BENCH_THREADS:-2}
WORKERS=${BENCH_WORKERS:-1}
IDLE=${BENCH_IDLE:-1000}
BODY=${BENCH_BODY_BYTES:-1024}
BUILD=${BENCH_BUILD:-yes}
KEEP=${BENCH_KEEP:-0}
REBOUND_BIN=${REBOUND_BIN:-$root/build/rebound}

for v in DURATION ROUNDS WARMUP CONNS THREADS WORKERS IDLE BODY; do
  [[ ${!v} =~ ^[0-9]+$ ]] || { echo "bench: $v must be a non-negative integer, got '${!v}'" >&2; exit 2; }
done
((DURATION >= 1 && ROUNDS >= 1 && CONNS >= 1 && THREADS >= 1 && BODY >= 1)) ||
  { echo "bench: DURATION, ROUNDS, CONNECTIONS, THREADS and BODY_BYTES must be >= 1" >&2; exit 2; }

log() { printf 'bench: %s\n' "$*" >&2; }
die() { printf 'bench: FAILED: %s\n' "$*" >&2; exit 1; }

# ---------------------------------------------------------------------------------------------
# Tools and the binary
export PATH="$PATH:/usr/sbin:/sbin"
need_deps=0
for tool in wrk nginx haproxy curl python3; do command -v "$tool" >/dev/null || need_deps=1; done
if [[ $BUILD == yes ]]; then
  "$root/scripts/install-deps" --bench
  "$root/scripts/build" >&2
elif ((need_deps)); then
  "$root/scripts/install-deps" --bench
fi
[[ -x $REBOUND_BIN ]] || die "no rebound binary at $REBOUND_BIN (build it with scripts/build)"
REBOUND_BIN=$(cd "$(dirname "$REBOUND_BIN")" && pwd)/$(basename "$REBOUND_BIN")

# Every process below inherits this limit; the idle test needs IDLE+ fds in rebound and haproxy.
want_fds=$((IDLE + 1024 > 4096 ? IDLE + 1024 : 4096))
if (($(ulimit -n) < want_fds)); then
  ulimit -n "$want_fds" 2>/dev/null || ulimit -n "$(ulimit -Hn)"
fi
(($(ulimit -n) >= IDLE + 256)) || die "ulimit -n is $(ulimit -n) (hard $(ulimit -Hn)); BENCH_IDLE=$IDLE needs more"

CLK_TCK=$(getconf CLK_TCK)
NCPU=$(nproc)
if ((WORKERS == 0)); then HAPROXY_THREADS=$NCPU; else HAPROXY_THREADS=$WORKERS; fi

# ---------------------------------------------------------------------------------------------
# Temp dir, process bookkeeping, cleanup
tmp=$(mktemp -d "${TMPDIR:-/tmp}/rebound-bench.XXXXXX")
chmod 755 "$tmp"   # nginx workers drop to `nobody` when started as root and must read html/
# Run a private copy, so a rebuild during the benchmark cannot swap the binary mid-run.
cp "$REBOUND_BIN" "$tmp/rebound-under-test"
REBOUND_SRC_BIN=$REBOUND_BIN
REBOUND_BIN=$tmp/rebound-under-test
declare -A pids=()  # name -> pid of everything we started and have not stopped yet
# shellcheck source=bench/proc.sh
source "$here/proc.sh"  # stop_proc, free_port, wait_port, cpu_ticks
status=1

cleanup() {
  local rc=$? name
  trap - EXIT INT TERM
  for name in "${!pids[@]}"; do stop_proc "$name" 5; done
  if ((status != 0)); then
    rc=$((rc == 0 ? 1 : rc))
    for f in "$tmp"/*.log "$tmp"/nginx/error.log; do
      [[ -s $f ]] && { echo "----- tail of $f" >&2; tail -n 20 "$f" >&2; }
    done
    echo "bench: temp dir kept for inspection: $tmp" >&2
  elif [[ $KEEP == 1 ]]; then
    echo "bench: temp dir kept: $tmp" >&2
  else
    rm -rf "$tmp"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

tick_s() { awk -v t="$1" -v hz="$CLK_TCK" 'BEGIN {printf "%.2f", t / hz}'; }

status_kib() {  # status_kib PID FIELD  -> value in KiB from /proc/PID/status (VmRSS, VmHWM)
  awk -v k="$2:" '$1 == k {print $2}' "/proc/$1/status"
}

busy_ticks() {  # all CPUs' non-idle time from /proc/stat (user nice system irq softirq steal)
  local _cpu user nice system idle iowait irq softirq steal _rest
  read -r _cpu user nice system idle iowait irq softirq steal _rest </proc/stat
  echo $((user + nice + system + irq + softirq + steal))
}

nginx_ticks() {  # the nginx master and its worker(s)
  local total=0 p
  for p in "${pids[nginx]}" $(pgrep -P "${pids[nginx]}" || true); do
    total=$((total + $(cpu_ticks "$p" 2>/dev/null || echo 0)))
  done
  echo "$total"
}

fd_count() { find "/proc/$1/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l; }

# ---------------------------------------------------------------------------------------------
# nginx: the upstream. One worker, not pinned, keep-alive on (and effectively unlimited requests
# per connection, so neither wrk nor the proxies' pools reconnect), no access log.
NGINX_PORT=$(free_port)
mkdir -p "$tmp/nginx/html"
head -c "$BODY" /dev/zero | tr '\0' 'x' >"$tmp/nginx/html/index.html"
chmod -R a+rX "$tmp/nginx"
nginx_temp_paths="client_body_temp_path $tmp/nginx/client_body;"
for m in proxy fastcgi uwsgi scgi; do
  nginx -V 2>&1 | grep -q -- "--without-http_${m}_module" ||
    nginx_temp_paths+=$'\n'"  ${m}_temp_path $tmp/nginx/$m;"
done
cat >"$tmp/nginx/nginx.conf" <<EOF
worker_processes 1;
daemon off;
master_process on;
pid $tmp/nginx/nginx.pid;
error_log $tmp/nginx/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  $nginx_temp_paths
  keepalive_timeout 75s;
  keepalive_requests 10000000;
  sendfile on;
  tcp_nodelay on;
  default_type text/plain;
  server {
    listen 127.0.0.1:$NGINX_PORT;
    root $tmp/nginx/html;
    index index.html;
  }
}
EOF

start_nginx() {
  nginx -p "$tmp/nginx" -e "$tmp/nginx/error.log" -c "$tmp/nginx/nginx.conf" >"$tmp/nginx.log" 2>&1 &
  pids[nginx]=$!
  wait_port nginx "$NGINX_PORT"
}

# rebound: the same one-hop forward proxy, built-in defaults for every policy.
start_rebound() {  # start_rebound NAME: sets REBOUND_PORT
  local name=$1
  REBOUND_PORT=$(free_port)
  REBOUND_ADMIN=$(free_port)
  cat >"$tmp/$name.yaml" <<EOF
listen: 127.0.0.1:$REBOUND_PORT
admin: 127.0.0.1:$REBOUND_ADMIN
workers: $WORKERS
drain_timeout: 5s
unknown_hosts: allow
EOF
  "$REBOUND_BIN" --config "$tmp/$name.yaml" >"$tmp/$name.log" 2>&1 &
  pids[$name]=$!
  wait_port "$name" "$REBOUND_PORT"
}

# haproxy 2.6 as the same one-hop forward proxy: the frontend takes absolute-form requests
# (HTTP_PROXY style), rewrites them to origin form as a forward proxy does, adds Via like
# rebound does, and sends them to the nginx backend; keep-alive on both sides, idle server
# connections reused across client connections (http-reuse always).
start_haproxy() {  # start_haproxy NAME: sets HAPROXY_PORT
  local name=$1
  HAPROXY_PORT=$(free_port)
  cat >"$tmp/$name.cfg" <<EOF
global
  nbthread $HAPROXY_THREADS
  maxconn $((IDLE + 4096))

defaults
  mode http
  option http-keep-alive
  timeout connect 5s
  timeout client 60s
  timeout server 60s
  timeout http-request 10s
  timeout http-keep-alive 60s

frontend forward_proxy
  bind 127.0.0.1:$HAPROXY_PORT
  http-request set-uri %[pathq]
  http-request add-header Via "1.1 haproxy"
  default_backend origin

backend origin
  http-reuse always
  server nginx 127.0.0.1:$NGINX_PORT
EOF
  haproxy -c -q -f "$tmp/$name.cfg" >"$tmp/$name.log" 2>&1 || die "haproxy rejected its config: $(cat "$tmp/$name.log")"
  haproxy -db -f "$tmp/$name.cfg" >"$tmp/$name.log" 2>&1 &
  pids[$name]=$!
  wait_port "$name" "$HAPROXY_PORT"
}

# ---------------------------------------------------------------------------------------------
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
log "temp dir $tmp; $NCPU CPUs; rebound workers=$WORKERS, haproxy nbthread=$HAPROXY_THREADS; load average $load_before"
busy=$(pgrep -l -x 'cc1plus|ninja|make|ld|wrk|stress' 2>/dev/null | awk '{print $2}' | sort | uniq -c | awk '{printf "%s%s x%s", sep, $2, $1; sep=", "}' || true)
[[ -z $busy ]] || log "WARNING: other busy processes are running ($busy); the numbers will be noisy"
start_nginx
start_rebound rebound
start_haproxy haproxy

ORIGIN_URL="http://127.0.0.1:$NGINX_PORT/"
declare -A proxy_port=([direct]="" [rebound]=$REBOUND_PORT [haproxy]=$HAPROXY_PORT)

# A benchmark of error responses is worthless: check each path returns nginx's 200 and body.
for target in direct rebound haproxy; do
  args=()
  [[ -n ${proxy_port[$target]} ]] && args=(-x "http://127.0.0.1:${proxy_port[$target]}")
  got=$(curl -sS --max-time 5 "${args[@]}" -D "$tmp/verify-$target.headers" -o "$tmp/verify-$target.body" \
          -w '%{http_code}' "$ORIGIN_URL") || die "curl via $target failed"
  [[ $got == 200 ]] || die "curl via $target: HTTP $got, expected 200 (headers in $tmp/verify-$target.headers)"
  cmp -s "$tmp/verify-$target.body" "$tmp/nginx/html/index.html" || die "curl via $target: body differs from nginx's file"
  log "verified: GET $ORIGIN_URL via $target -> 200, $BODY-byte body"
done
rebound_via=$(tr -d '\r' <"$tmp/verify-rebound.headers" | awk -F': ' 'tolower($1) == "via" {print $2}')

run_wrk() {  # run_wrk TARGET SECONDS OUTFILE: one wrk run; proxy targets use proxy-form requests
  local target=$1 secs=$2 out=$3 url=$ORIGIN_URL proxy_target=""
  if [[ -n ${proxy_port[$target]} ]]; then
    url="http://127.0.0.1:${proxy_port[$target]}/"
    proxy_target=$ORIGIN_URL
  fi
  local TIMEFORMAT='%3U %3S'   # wrk's own CPU (user, system seconds), from the time keyword
  { time BENCH_TARGET_URL=$proxy_target timeout $((secs + 30)) \
      wrk -t"$THREADS" -c"$CONNS" -d"${secs}s" --latency -s "$here/wrk-report.lua" "$url" >"$out" 2>&1; } \
    2>"$out.cpu" || die "wrk against $target failed: $(tail -n 5 "$out")"
  grep -q '^BENCH ' "$out" || die "wrk against $target printed no result line: $(tail -n 5 "$out")"
}

if ((WARMUP > 0)); then
  for target in direct rebound haproxy; do
    log "warm-up: $target ${WARMUP}s"
    run_wrk "$target" "$WARMUP" "$tmp/wrk-warmup-$target.txt"
  done
fi

: >"$tmp/runs.tsv"
order=(direct rebound haproxy)
for ((round = 1; round <= ROUNDS; round++)); do
  for ((i = 0; i < 3; i++)); do
    target=${order[(i + round - 1) % 3]}
    pid=${pids[$target]:-}
    log "round $round/$ROUNDS: $target ${DURATION}s"
    before=0
    [[ -n $pid ]] && before=$(cpu_ticks "$pid")
    nginx_before=$(nginx_ticks)
    busy_before=$(busy_ticks)
    out="$tmp/wrk-$round-$target.txt"
    run_wrk "$target" "$DURATION" "$out"
    for name in nginx "$target"; do
      [[ -z ${pids[$name]:-} ]] || kill -0 "${pids[$name]}" 2>/dev/null ||
        die "$name exited during the $target run (see $tmp/$name.log)"
    done
    ticks=0
    [[ -n $pid ]] && ticks=$(($(cpu_ticks "$pid") - before))
    # CPU the machine spent outside wrk, nginx and the proxy during the run: other processes
    # (a compiler...) plus kernel work not charged to any process (loopback softirq).
    busy_used=$(($(busy_ticks) - busy_before))
    nginx_used=$(($(nginx_ticks) - nginx_before))
    wrk_used=$(awk -v hz="$CLK_TCK" '{printf "%d", ($1 + $2) * hz + 0.5}' "$out.cpu")
    other=$((busy_used - ticks - nginx_used - wrk_used))
    ((other >= 0)) || other=0
    line=$(grep '^BENCH ' "$out")
    declare -A r=()
    for kv in ${line#BENCH }; do r[${kv%%=*}]=${kv#*=}; done
    printf '%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n' "$target" "$round" \
      "${r[requests]}" "${r[duration_us]}" "${r[p50_us]}" "${r[p99_us]}" \
      "${r[connect]}" "${r[read]}" "${r[write]}" "${r[status]}" "${r[timeout]}" "$ticks" \
      "$wrk_used" "$nginx_used" "$other" >>"$tmp/runs.tsv"
    log "  $((r[requests] * 1000000 / r[duration_us])) req/s; CPU s: proxy $(tick_s "$ticks"), wrk $(tick_s "$wrk_used"), nginx $(tick_s "$nginx_used"), other $(tick_s "$other")"
    if ((other * 10 > DURATION * CLK_TCK * 3)); then
      log "WARNING: $target round $round: $(tick_s "$other") CPU seconds went to something other than wrk, nginx and the proxy: a disturbed run"
    fi
    errs=$((r[connect] + r[read] + r[write] + r[status] + r[timeout]))
    if ((errs > 0)); then
      log "WARNING: $target round $round: wrk errors: connect ${r[connect]}, read ${r[read]}, write ${r[write]}, non-2xx/3xx ${r[status]}, timeout ${r[timeout]}"
      grep -E 'Socket errors|Non-2xx' "$out" >&2 || true
    fi
    unset r
  done
done

: >"$tmp/peaks.tsv"
for target in rebound haproxy; do
  printf '%s\t%s\n' "$target" "$(status_kib "${pids[$target]}" VmHWM)" >>"$tmp/peaks.tsv"
done

# rebound must drain and exit 0 on SIGTERM (its contract); report what it did.
stop_proc rebound 15
rebound_stop_rc=$stop_rc
stop_proc haproxy 5

# ---------------------------------------------------------------------------------------------
# Memory with IDLE idle client connections, each on a freshly started proxy:
#   fresh      connections that sent nothing yet
#   keepalive  connections that made one proxied request (200) and now sit idle
: >"$tmp/idle.tsv"
idle_measure() {  # idle_measure PROXY MODE
  local proxy=$1 mode=$2 name=idle-$1-$2 port pid rss_before fds_before rss_after fds_after i
  case $proxy in
    rebound) start_rebound "$name"; port=$REBOUND_PORT ;;
    haproxy) start_haproxy "$name"; port=$HAPROXY_PORT ;;
  esac
  pid=${pids[$name]}
  sleep 1
  rss_before=$(status_kib "$pid" VmRSS)
  fds_before=$(fd_count "$pid")
  rm -f "$tmp/$name.ready" "$tmp/$name.stop"
  timeout 180 python3 "$here/idle_conns.py" 127.0.0.1 "$port" "$IDLE" "$mode" \
    "$tmp/$name.ready" "$tmp/$name.stop" 120 "$ORIGIN_URL" >"$tmp/$name.client.log" 2>&1 &
  local client=$!
  for ((i = 0; i < 1200; i++)); do
    [[ -e $tmp/$name.ready ]] && break
    kill -0 "$client" 2>/dev/null || break
    sleep 0.1
  done
  [[ -e $tmp/$name.ready ]] || die "idle client for $proxy ($mode) did not get ready: $(tail -n 5 "$tmp/$name.client.log")"
  sleep 2   # let the proxy finish accepting and settle
  rss_after=$(status_kib "$pid" VmRSS)
  fds_after=$(fd_count "$pid")
  touch "$tmp/$name.stop"
  wait "$client" || die "idle client for $proxy ($mode) failed: $(tail -n 5 "$tmp/$name.client.log")"
  local opened still ok failed
  read -r opened still < <(sed -n 's/^opened=\([0-9]*\) still_open=\([0-9]*\)$/\1 \2/p' "$tmp/$name.client.log") || true
  read -r ok failed < <(sed -n 's/^ok=\([0-9]*\) failed=\([0-9]*\)$/\1 \2/p' "$tmp/$name.ready") || true
  [[ -n $opened && -n $ok ]] || die "idle client for $proxy ($mode) reported nothing: $(tail -n 5 "$tmp/$name.client.log")"
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$proxy" "$mode" "$rss_before" "$rss_after" \
    "$fds_before" "$fds_after" "$opened" "$still" "$ok" "$failed" >>"$tmp/idle.tsv"
  log "idle $proxy $mode: VmRSS ${rss_before} -> ${rss_after} KiB, fds $fds_before -> $fds_after, still open $still/$opened"
  stop_proc "$name" 15
}
if ((IDLE > 0)); then
  for proxy in rebound haproxy; do
    for mode in fresh keepalive; do
      log "idle connections: $proxy, $mode, $IDLE"
      idle_measure "$proxy" "$mode"
    done
  done
fi
stop_proc nginx 5

# ---------------------------------------------------------------------------------------------
rebound_version=$("$REBOUND_BIN" --version 2>/dev/null | head -n 1 || true)
rebound_rev=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo "no commit")
if ! git -C "$root" diff --quiet HEAD -- 2>/dev/null; then rebound_rev+=" + uncommitted changes"; fi
build_dir=$(dirname "$REBOUND_SRC_BIN")
build_type=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$build_dir/CMakeCache.txt" 2>/dev/null || true)
build_flags=$(grep -m1 -o -E -- '^ *FLAGS = .*' "$build_dir/build.ninja" 2>/dev/null | grep -o -E -- '-O[0-9a-z]*|-g[0-9]*|-fsanitize=[^ ]*' | tr '\n' ' ' || true)
build_type="${build_type:-default} build${build_flags:+, flags ${build_flags% }}"

echo "## rebound forward-proxy benchmark"
echo
echo "- $(date -u '+%Y-%m-%d %H:%M UTC'), $(uname -sr), $NCPU CPUs ($(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo))"
echo "- rebound: ${rebound_version:-unknown version} ($rebound_rev, $build_type), workers: $WORKERS; haproxy $(haproxy -v | awk 'NR==1 {print $3}') nbthread $HAPROXY_THREADS; nginx $(nginx -v 2>&1 | sed 's|.*/||') 1 worker; wrk $(wrk -v 2>&1 | awk 'NR==1 {print $2}')"
echo "- wrk -t$THREADS -c$CONNS -d${DURATION}s, $ROUNDS rounds (order rotated each round), ${WARMUP}s warm-up per target; GET $ORIGIN_URL, $BODY-byte body; proxies get absolute-form requests"
echo "- **wrk, nginx and the proxy share the same $NCPU cores (nothing pinned)**: absolute numbers are low and the proxy competes with its own load generator; compare the rows, not with other machines."
echo "- load average before the run: $load_before${busy:+; **other busy processes were running: $busy**}"
echo "- every path was checked with curl first (200 and nginx's exact body); rebound's response carried Via: ${rebound_via:-<none>}"
echo
python3 "$here/report.py" "$tmp" "$CLK_TCK" "$IDLE"
echo
if [[ $rebound_stop_rc == 0 ]]; then
  echo "rebound exited 0 on SIGTERM after the load runs."
else
  echo "**rebound exited with status $rebound_stop_rc on SIGTERM** (expected 0; 137 = killed after 15 s)."
fi
status=0
