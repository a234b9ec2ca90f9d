#!/usr/bin/env bash
# One-hop forward-proxy benchmark on 127.0.0.1: wrk → {nginx | rebound → nginx | haproxy → nginx},
# over the scenarios users run (issue 20): small GETs at 64 connections with one and two
# proxy threads, 1,000 connections, 16 KiB and 1 MiB responses, 64 KiB POSTs, TLS origination,
# and rebound's retry policy on against retry_on narrowed to nothing. Each scenario starts its
# proxies afresh (so peak RSS is that scenario's), runs a warm-up, then BENCH_ROUNDS rounds that
# alternate the targets. Prints a Markdown report on stdout (progress goes to stderr). See
# bench/README.md.
#
# Settings (environment):
#   BENCH_SCENARIOS="get1k-w1 get1k-w2 c1000 get16k get1m post64k tls retry grpc"   what to run
#                            (grpc: bench/grpc.sh's gRPC unary calls through rebound and HAProxy)
#   BENCH_DURATION=5         seconds per measured wrk run
#   BENCH_ROUNDS=3           rounds; each round runs every target of a scenario once (order rotates)
#   BENCH_WARMUP=1           seconds of unrecorded wrk per target before round 1 (0 = none)
#   BENCH_CONNECTIONS=64     wrk -c (the c1000 scenario uses 1000)
#   BENCH_THREADS=2          wrk -t
#   BENCH_WORKERS=1          rebound `workers:` and haproxy `nbthread` where a scenario does not
#                            set them (get1k-w1: 1, get1k-w2: 2; 0 = one per core for both)
#   BENCH_IDLE=1000          idle client connections for the memory measurement (0 = skip)
#   BENCH_BUILD=yes          yes: scripts/install-deps + scripts/build first (a no-op when up to date);
#                            no: use REBOUND_BIN as it is
#   REBOUND_BIN=build/rebound
#   BENCH_KEEP=0             1: keep the temp dir (configs, logs, raw wrk output) even on success
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")

SCENARIOS=${BENCH_SCENARIOS:-get1k-w1 get1k-w2 c1000 get16k get1m post64k tls retry grpc}
DURATION=${BENCH_DURATION:-5}
ROUNDS=${BENCH_ROUNDS:-3}
WARMUP=${BENCH_WARMUP:-1}
CONNS=${BENCH_CONNECTIONS:-64}
THREADS=${BENCH_THREADS:-2}
WORKERS=${BENCH_WORKERS:-1}
IDLE=${BENCH_IDLE:-1000}
BUILD=${BENCH_BUILD:-yes}
KEEP=${BENCH_KEEP:-0}
REBOUND_BIN=${REBOUND_BIN:-$root/build/rebound}

for v in DURATION ROUNDS WARMUP CONNS THREADS WORKERS IDLE; do
  [[ ${!v} =~ ^[0-9]+$ ]] || { echo "bench: $v must be a non-negative integer, got '${!v}'" >&2; exit 2; }
done
((DURATION >= 1 && ROUNDS >= 1 && CONNS >= 1 && THREADS >= 1)) ||
  { echo "bench: DURATION, ROUNDS, CONNECTIONS and THREADS must be >= 1" >&2; exit 2; }
for sc in $SCENARIOS; do
  case $sc in get1k-w1 | get1k-w2 | c1000 | get16k | get1m | post64k | tls | retry | grpc) ;;
    *) echo "bench: unknown scenario '$sc'" >&2; exit 2 ;;
  esac
done

log() { printf 'bench: %s\n' "$*" >&2; }
die() { printf 'bench: FAILED: %s\n' "$*" >&2; exit 1; }

# ---------------------------------------------------------------------------------------------
# Tools and the binary
export PATH="$PATH:/usr/sbin:/sbin"
need_deps=0
for tool in wrk nginx haproxy curl python3 openssl; do command -v "$tool" >/dev/null || need_deps=1; done
if [[ $BUILD == yes ]]; then
  "$root/scripts/install-deps" --bench
  "$root/scripts/build" >&2
elif ((need_deps)); then
  "$root/scripts/install-deps" --bench
fi
[[ -x $REBOUND_BIN ]] || die "no rebound binary at $REBOUND_BIN (build it with scripts/build)"
REBOUND_BIN=$(cd "$(dirname "$REBOUND_BIN")" && pwd)/$(basename "$REBOUND_BIN")

# Every process below inherits this limit; the idle test needs IDLE+ fds in rebound and haproxy.
want_fds=$((IDLE + 1024 > 8192 ? IDLE + 1024 : 8192))  # c1000: 1,000 clients + upstreams
if (($(ulimit -n) < want_fds)); then
  ulimit -n "$want_fds" 2>/dev/null || ulimit -n "$(ulimit -Hn)"
fi
(($(ulimit -n) >= IDLE + 256)) || die "ulimit -n is $(ulimit -n) (hard $(ulimit -Hn)); BENCH_IDLE=$IDLE needs more"

CLK_TCK=$(getconf CLK_TCK)
NCPU=$(nproc)
threads_for() { if (($1 == 0)); then echo "$NCPU"; else echo "$1"; fi; }

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
# per connection, so neither wrk nor the proxies' pools reconnect), no access log. Static files
# of 1 KiB (/), 16 KiB and 1 MiB; /post reads a POST's body and answers 200; the same files
# over TLS on a second port, with a self-signed certificate for 127.0.0.1 that both proxies
# are given as their CA and verify.
NGINX_PORT=$(free_port)
NGINX_TLS_PORT=$(free_port)
mkdir -p "$tmp/nginx/html" "$tmp/tls"
head -c 1024 /dev/zero | tr '\0' 'x' >"$tmp/nginx/html/index.html"
head -c 16384 /dev/zero | tr '\0' 'x' >"$tmp/nginx/html/16k"
head -c 1048576 /dev/zero | tr '\0' 'x' >"$tmp/nginx/html/1m"
head -c 65536 /dev/zero | tr '\0' 'x' >"$tmp/post-body"
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=127.0.0.1 \
  -addext "subjectAltName=IP:127.0.0.1,DNS:localhost" -addext "basicConstraints=critical,CA:TRUE" \
  -keyout "$tmp/tls/key.pem" -out "$tmp/tls/cert.pem" >/dev/null 2>&1 || die "openssl could not make the test certificate"
chmod -R a+rX "$tmp/nginx" "$tmp/tls"
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
events { worker_connections 8192; }
http {
  access_log off;
  $nginx_temp_paths
  keepalive_timeout 75s;
  keepalive_requests 10000000;
  sendfile on;
  tcp_nodelay on;
  default_type text/plain;
  client_body_buffer_size 128k;
  client_max_body_size 1m;
  server {
    # backlog: 1,000 connections at once overflow nginx's default 511 (SYN drops, 1 s retries).
    listen 127.0.0.1:$NGINX_PORT backlog=4096;
    listen 127.0.0.1:$NGINX_TLS_PORT ssl backlog=4096;
    ssl_certificate $tmp/tls/cert.pem;
    ssl_certificate_key $tmp/tls/key.pem;
    ssl_session_cache shared:tls:1m;
    root $tmp/nginx/html;
    index index.html;
    # echo_read_request_body is not in nginx-light: proxying the body to a local return reads it.
    location = /post { proxy_pass http://127.0.0.1:$NGINX_PORT/post-sink; proxy_http_version 1.1; proxy_set_header Connection ""; }
    location = /post-sink { return 200 "ok"; }
  }
}
EOF
nginx -p "$tmp/nginx" -e "$tmp/nginx/error.log" -c "$tmp/nginx/nginx.conf" >"$tmp/nginx.log" 2>&1 &
pids[nginx]=$!
wait_port nginx "$NGINX_PORT"

# rebound: the same one-hop forward proxy, built-in defaults for every policy. TLS origination
# is a dependency whose origin is nginx's TLS port, reached as http://tls-origin/ by clients.
start_rebound() {  # start_rebound NAME WORKERS [RETRY_ON]: sets REBOUND_PORT
  local name=$1 workers=$2 retry_on=${3:-default}
  REBOUND_PORT=$(free_port)
  REBOUND_ADMIN=$(free_port)
  cat >"$tmp/$name.yaml" <<EOF
listen: 127.0.0.1:$REBOUND_PORT
admin: 127.0.0.1:$REBOUND_ADMIN
workers: $workers
drain_timeout: 5s
unknown_hosts: allow
defaults:
  retry_on: $retry_on
dependencies:
  tls-origin:
    hosts: [tls-origin]
    origin: https://127.0.0.1:$NGINX_TLS_PORT
    tls:
      ca_file: $tmp/tls/cert.pem
EOF
  "$REBOUND_BIN" --config "$tmp/$name.yaml" >"$tmp/$name.log" 2>&1 &
  pids[$name]=$!
  wait_port "$name" "$REBOUND_PORT"
}

# haproxy 2.6 as the same one-hop forward proxy: the frontend takes absolute-form requests
# (HTTP_PROXY style), rewrites them to origin form as a forward proxy does, adds Via like
# rebound does, and sends them to the nginx backend; keep-alive on both sides, idle server
# connections reused across client connections (http-reuse always). Requests for tls-origin go
# to nginx's TLS port, the certificate verified against the same CA file and name as rebound's.
start_haproxy() {  # start_haproxy NAME THREADS: sets HAPROXY_PORT
  local name=$1 threads=$2
  HAPROXY_PORT=$(free_port)
  cat >"$tmp/$name.cfg" <<EOF
global
  nbthread $threads
  maxconn $((IDLE + 8192))

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
  use_backend tls_origin if { hdr(host) -i tls-origin }
  default_backend origin

backend origin
  http-reuse always
  server nginx 127.0.0.1:$NGINX_PORT

backend tls_origin
  http-reuse always
  server nginx_tls 127.0.0.1:$NGINX_TLS_PORT ssl verify required ca-file $tmp/tls/cert.pem verifyhost 127.0.0.1
EOF
  haproxy -c -q -f "$tmp/$name.cfg" >"$tmp/$name.log" 2>&1 || die "haproxy rejected its config: $(cat "$tmp/$name.log")"
  haproxy -db -f "$tmp/$name.cfg" >"$tmp/$name.log" 2>&1 &
  pids[$name]=$!
  wait_port "$name" "$HAPROXY_PORT"
}

# ---------------------------------------------------------------------------------------------
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
log "temp dir $tmp; $NCPU CPUs; scenarios: $SCENARIOS; load average $load_before"
busy=$(pgrep -l -x 'cc1plus|ninja|make|ld|wrk|stress' 2>/dev/null | awk '{print $2}' | sort | uniq -c | awk '{printf "%s%s x%s", sep, $2, $1; sep=", "}' || true)
[[ -z $busy ]] || log "WARNING: other busy processes are running ($busy); the numbers will be noisy"

# What a scenario asks of wrk and the proxies; set by scenario_setup.
declare -A proxy_port=()
SC_URL= SC_PROXY_URL= SC_DIRECT_URL= SC_CONNS= SC_WORKERS= SC_POST= SC_TARGETS=() SC_EXPECT_BYTES=
scenario_setup() {  # scenario_setup NAME
  SC_CONNS=$CONNS SC_WORKERS=$WORKERS SC_POST= SC_TARGETS=(direct rebound haproxy)
  SC_PROXY_URL="http://127.0.0.1:$NGINX_PORT/" SC_DIRECT_URL="http://127.0.0.1:$NGINX_PORT/"
  SC_EXPECT_BYTES=1024
  case $1 in
    get1k-w1) SC_WORKERS=1 ;;
    get1k-w2) SC_WORKERS=2 ;;
    c1000) SC_CONNS=1000 ;;
    get16k) SC_PROXY_URL+=16k SC_DIRECT_URL+=16k SC_EXPECT_BYTES=16384 ;;
    get1m) SC_PROXY_URL+=1m SC_DIRECT_URL+=1m SC_EXPECT_BYTES=1048576 ;;
    post64k) SC_PROXY_URL+=post SC_DIRECT_URL+=post SC_POST=$tmp/post-body SC_EXPECT_BYTES=2 ;;
    tls) SC_PROXY_URL="http://tls-origin/" SC_DIRECT_URL="https://127.0.0.1:$NGINX_TLS_PORT/" ;;
    retry) SC_TARGETS=(rebound rebound_noretry) ;;
  esac
}

start_targets() {  # the proxies of the current scenario, fresh
  local t
  proxy_port=([direct]="")
  for t in "${SC_TARGETS[@]}"; do
    case $t in
      rebound) start_rebound rebound "$SC_WORKERS"; proxy_port[rebound]=$REBOUND_PORT ;;
      rebound_noretry) start_rebound rebound_noretry "$SC_WORKERS" "[]"; proxy_port[rebound_noretry]=$REBOUND_PORT ;;
      haproxy) start_haproxy haproxy "$(threads_for "$SC_WORKERS")"; proxy_port[haproxy]=$HAPROXY_PORT ;;
    esac
  done
}

verify_targets() {  # each path must answer 200 with the expected body: a benchmark of errors is worthless
  local target args got size
  for target in "${SC_TARGETS[@]}"; do
    args=(--cacert "$tmp/tls/cert.pem")
    [[ -n ${SC_POST} ]] && args+=(--data-binary "@$SC_POST")
    local url=$SC_DIRECT_URL
    if [[ -n ${proxy_port[$target]} ]]; then
      args+=(-x "http://127.0.0.1:${proxy_port[$target]}")
      url=$SC_PROXY_URL
    fi
    got=$(curl -sS --max-time 10 "${args[@]}" -D "$tmp/verify-$target.headers" -o "$tmp/verify-$target.body" \
      -w '%{http_code}' "$url") || die "curl via $target failed ($url)"
    [[ $got == 200 ]] || die "curl via $target: HTTP $got for $url, expected 200 (headers in $tmp/verify-$target.headers)"
    size=$(stat -c %s "$tmp/verify-$target.body")
    [[ $size == "$SC_EXPECT_BYTES" ]] || die "curl via $target: $size body bytes for $url, expected $SC_EXPECT_BYTES"
  done
}

run_wrk() {  # run_wrk TARGET SECONDS OUTFILE: one wrk run; proxy targets use proxy-form requests
  local target=$1 secs=$2 out=$3 url=$SC_DIRECT_URL proxy_target=""
  if [[ -n ${proxy_port[$target]} ]]; then
    url="http://127.0.0.1:${proxy_port[$target]}/"
    proxy_target=$SC_PROXY_URL
  fi
  local TIMEFORMAT='%3U %3S'   # wrk's own CPU (user, system seconds), from the time keyword
  { time BENCH_TARGET_URL=$proxy_target BENCH_POST_FILE=$SC_POST timeout $((secs + 30)) \
      wrk -t"$THREADS" -c"$SC_CONNS" -d"${secs}s" --latency -s "$here/wrk-report.lua" "$url" >"$out" 2>&1; } \
    2>"$out.cpu" || die "wrk against $target failed: $(tail -n 5 "$out")"
  grep -q '^BENCH ' "$out" || die "wrk against $target printed no result line: $(tail -n 5 "$out")"
}

: >"$tmp/runs.tsv"
: >"$tmp/peaks.tsv"
: >"$tmp/stops.tsv"
for scenario in $SCENARIOS; do
  [[ $scenario == grpc ]] && continue  # its own script, after the report below
  scenario_setup "$scenario"
  start_targets
  verify_targets
  log "scenario $scenario: ${SC_TARGETS[*]}, $SC_CONNS connections, workers/nbthread $SC_WORKERS, $SC_PROXY_URL"
  if ((WARMUP > 0)); then
    for target in "${SC_TARGETS[@]}"; do run_wrk "$target" "$WARMUP" "$tmp/wrk-warmup-$scenario-$target.txt"; done
  fi
  n=${#SC_TARGETS[@]}
  for ((round = 1; round <= ROUNDS; round++)); do
    for ((i = 0; i < n; i++)); do
      target=${SC_TARGETS[(i + round - 1) % n]}
      pid=${pids[$target]:-}
      before=0
      [[ -n $pid ]] && before=$(cpu_ticks "$pid")
      nginx_before=$(nginx_ticks)
      busy_before=$(busy_ticks)
      out="$tmp/wrk-$scenario-$round-$target.txt"
      run_wrk "$target" "$DURATION" "$out"
      for name in nginx "$target"; do
        [[ -z ${pids[$name]:-} ]] || kill -0 "${pids[$name]}" 2>/dev/null ||
          die "$name exited during the $scenario $target run (see $tmp/$name.log)"
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
      printf '%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n' "$scenario" "$target" "$round" \
        "${r[requests]}" "${r[duration_us]}" "${r[p50_us]}" "${r[p99_us]}" \
        "${r[connect]}" "${r[read]}" "${r[write]}" "${r[status]}" "${r[timeout]}" "$ticks" \
        "$wrk_used" "$nginx_used" "$other" "${r[bytes]}" >>"$tmp/runs.tsv"
      log "  $scenario round $round/$ROUNDS $target: $((r[requests] * 1000000 / r[duration_us])) req/s; CPU s: proxy $(tick_s "$ticks"), wrk $(tick_s "$wrk_used"), nginx $(tick_s "$nginx_used"), other $(tick_s "$other")"
      if ((other * 10 > DURATION * CLK_TCK * 3)); then
        log "WARNING: $scenario $target round $round: $(tick_s "$other") CPU seconds went to something other than wrk, nginx and the proxy: a disturbed run"
      fi
      errs=$((r[connect] + r[read] + r[write] + r[status] + r[timeout]))
      if ((errs > 0)); then
        log "WARNING: $scenario $target round $round: wrk errors: connect ${r[connect]}, read ${r[read]}, write ${r[write]}, non-2xx/3xx ${r[status]}, timeout ${r[timeout]}"
      fi
      unset r
    done
  done
  for target in "${SC_TARGETS[@]}"; do
    [[ -n ${pids[$target]:-} ]] || continue
    printf '%s\t%s\t%s\n' "$scenario" "$target" "$(status_kib "${pids[$target]}" VmHWM)" >>"$tmp/peaks.tsv"
    # rebound must drain and exit 0 on SIGTERM (its contract); report what it did.
    stop_proc "$target" 15
    printf '%s\t%s\t%s\n' "$scenario" "$target" "$stop_rc" >>"$tmp/stops.tsv"
  done
done

# ---------------------------------------------------------------------------------------------
# Memory with IDLE idle client connections, each on a freshly started proxy:
#   fresh      connections that sent nothing yet
#   keepalive  connections that made one proxied request (200) and now sit idle
: >"$tmp/idle.tsv"
idle_measure() {  # idle_measure PROXY MODE
  local proxy=$1 mode=$2 name=idle-$1-$2 port pid rss_before fds_before rss_after fds_after i
  case $proxy in
    rebound) start_rebound "$name" "$WORKERS"; port=$REBOUND_PORT ;;
    haproxy) start_haproxy "$name" "$(threads_for "$WORKERS")"; port=$HAPROXY_PORT ;;
  esac
  pid=${pids[$name]}
  sleep 1
  rss_before=$(status_kib "$pid" VmRSS)
  fds_before=$(fd_count "$pid")
  rm -f "$tmp/$name.ready" "$tmp/$name.stop"
  timeout 180 python3 "$here/idle_conns.py" 127.0.0.1 "$port" "$IDLE" "$mode" \
    "$tmp/$name.ready" "$tmp/$name.stop" 120 "http://127.0.0.1:$NGINX_PORT/" >"$tmp/$name.client.log" 2>&1 &
  local client=$!
  for ((i = 0; i < 1200; i++)); do
    [[ -e $tmp/$name.ready ]] && break
    kill -0 "$client" 2>/dev/null || break
    sleep 0.1
  done
  [[ -e $tmp/$name.ready ]] || die "idle client for $proxy ($mode) did not get ready: $(tail -n 5 "$tmp/$name.client.log")"
  # Let the proxy finish accepting and settle: rebound parks a connection after a second
  # without a request and gives freed pages back every five (bench/README.md, idle memory).
  sleep 6
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
echo "- rebound: ${rebound_version:-unknown version} ($rebound_rev, $build_type); haproxy $(haproxy -v | awk 'NR==1 {print $3}'); nginx $(nginx -v 2>&1 | sed 's|.*/||') 1 worker; wrk $(wrk -v 2>&1 | awk 'NR==1 {print $2}')"
echo "- rebound \`workers\` = haproxy \`nbthread\` = $WORKERS unless a scenario says otherwise; wrk -t$THREADS -c$CONNS (c1000: 1000) -d${DURATION}s, $ROUNDS rounds (order rotated each round), ${WARMUP}s warm-up per target; proxies get absolute-form requests and are started afresh for each scenario"
echo "- **wrk, nginx and the proxy share the same $NCPU cores (nothing pinned)**: absolute numbers are low and the proxy competes with its own load generator; compare the rows, not with other machines."
echo "- load average before the run: $load_before${busy:+; **other busy processes were running: $busy**}"
echo "- every path of every scenario was checked with curl first (200 and the expected body size)"
echo
[[ -s $tmp/runs.tsv || $IDLE -gt 0 ]] && python3 "$here/report.py" "$tmp" "$CLK_TCK" "$IDLE"
if [[ " $SCENARIOS " == *" grpc "* ]]; then
  log "scenario grpc: bench/grpc.sh"
  echo
  echo "### gRPC unary calls (bench/grpc.sh: h2load -c16 -m8, h2c on both legs)"
  echo
  BENCH_BUILD=no REBOUND_BIN=$REBOUND_BIN BENCH_DURATION=$DURATION BENCH_ROUNDS=$ROUNDS \
    BENCH_WORKERS=$(threads_for "$WORKERS") bash "$here/grpc.sh" || die "bench/grpc.sh failed"
fi
status=0
