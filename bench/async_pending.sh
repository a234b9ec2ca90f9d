#!/usr/bin/env bash
# rebound with a large backlog in its store (issue 17): memory and start-up time with
# BENCH_TASKS (1,000,000) tasks pending, against the same on an empty store, then memory while
# the scheduler delivers from that backlog. Prints a Markdown report on stdout; progress on stderr.
#
#   bench/async_pending.sh [path-to-rebound]     # default build/rebound; ~3 minutes
#   BENCH_RUNS=3 BENCH_DELIVER_SECONDS=10 bench/async_pending.sh build/rebound
#
# Settings (environment):
#   BENCH_TASKS=1000000          tasks seeded in the store
#   BENCH_RUNS=5                 measured starts per store (empty, pending), alternating order
#   BENCH_DELIVER_RUNS=3         starts on a store whose tasks are all due (a fresh copy each)
#   BENCH_DELIVER_SECONDS=15     how long each of those delivers before it is measured and stopped
#   BENCH_SETTLE=2               seconds after /readyz before memory is read on the idle starts
#   BENCH_WORKERS=0              rebound `workers:` (0 = one per core)
#   BENCH_KEEP=0                 1: keep the temp dir (stores, configs, logs) even on success
#   TMPDIR                       where the store files go (~1.5 GB at 1,000,000 tasks)
#
# The store is seeded while rebound is not running (it holds the file with locking_mode=EXCLUSIVE):
# rebound creates and migrates an empty store, is stopped, and the sqlite3 CLI then inserts the
# tasks in one transaction from a recursive CTE, naming its columns (a later column with a
# default does not break it). Tasks look like handed-over webhooks: random UUIDv4 ids and
# idempotency keys, the key also in the stored headers, a POST to the local nginx.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")

TASKS=${BENCH_TASKS:-1000000}
RUNS=${BENCH_RUNS:-5}
DELIVER_RUNS=${BENCH_DELIVER_RUNS:-3}
DELIVER_SECONDS=${BENCH_DELIVER_SECONDS:-15}
SETTLE=${BENCH_SETTLE:-2}
WORKERS=${BENCH_WORKERS:-0}
KEEP=${BENCH_KEEP:-0}
REBOUND_BIN=${1:-${REBOUND_BIN:-$root/build/rebound}}

for v in TASKS RUNS DELIVER_RUNS DELIVER_SECONDS SETTLE WORKERS; do
  [[ ${!v} =~ ^[0-9]+$ ]] || { echo "bench: $v must be a non-negative integer, got '${!v}'" >&2; exit 2; }
done
((TASKS >= 1 && RUNS >= 1 && DELIVER_SECONDS >= 1)) ||
  { echo "bench: BENCH_TASKS, BENCH_RUNS and BENCH_DELIVER_SECONDS must be >= 1" >&2; exit 2; }

log() { printf 'bench: %s\n' "$*" >&2; }
die() { printf 'bench: FAILED: %s\n' "$*" >&2; exit 1; }

# ---------------------------------------------------------------------------------------------
# Tools and the binary
export PATH="$PATH:/usr/sbin:/sbin"
"$root/scripts/install-deps" --bench   # nginx, curl, python3; a no-op when present
if ! command -v sqlite3 >/dev/null; then
  sudo=""; [[ $(id -u) -eq 0 ]] || sudo="sudo"
  log "installing sqlite3 (the CLI seeds the store)"
  $sudo apt-get update -q >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends sqlite3 >&2
fi
[[ -x $REBOUND_BIN ]] || "$root/scripts/build" >&2
[[ -x $REBOUND_BIN ]] || die "no rebound binary at $REBOUND_BIN (build it with scripts/build)"
((BASH_VERSINFO[0] >= 5)) || die "bash 5 is needed (EPOCHREALTIME)"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/rebound-pending-bench.XXXXXX")
chmod 755 "$tmp"
# A private copy, so a rebuild during the benchmark cannot swap the binary mid-run.
cp "$REBOUND_BIN" "$tmp/rebound-under-test"
REBOUND_SRC_BIN=$REBOUND_BIN
REBOUND_BIN=$tmp/rebound-under-test
declare -A pids=()
# shellcheck source=bench/proc.sh
source "$here/proc.sh"  # stop_proc, free_port, wait_port
status=1
bench_started=$(date +%s)

cleanup() {
  local rc=$? name f
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

now_us() { local t=$EPOCHREALTIME; echo "${t//[.,]/}"; }  # no fork: wall clock in microseconds
# A sleep without a fork (a read that times out on a FIFO nobody writes), for the 2 ms polls.
mkfifo "$tmp/never"
exec {never_fd}<>"$tmp/never"
nap() { read -r -t "$1" -u "$never_fd" _ || true; }
status_kib() { awk -v k="$2:" '$1 == k {print $2}' "/proc/$1/status"; }
mib() { awk -v k="$1" 'BEGIN {printf "%.1f", k / 1024}'; }
median() { printf '%s\n' "$@" | sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b > 0) printf "%.2f", a / b; else print "n/a"}'; }
thousands() { sed -e ':a' -e 's/\B[0-9]\{3\}\>/,&/' -e 'ta' <<<"$1"; }
busy_now() {
  pgrep -l -x 'cc1plus|ninja|make|ld|wrk|stress' 2>/dev/null | awk '{print $2}' | sort | uniq -c |
    awk '{printf "%s%s x%s", sep, $2, $1; sep=", "}' || true
}

# ---------------------------------------------------------------------------------------------
# nginx: the upstream deliveries go to (200 to everything, one status per line in its log).
NGINX_PORT=$(free_port)
start_nginx_app "$NGINX_PORT" "access_log $tmp/nginx/access.log bare buffer=64k flush=1s;" 'return 200 "ok\n";'

# ---------------------------------------------------------------------------------------------
# rebound, started on a store file; READY_MS is the time from the fork+exec until its admin
# /readyz answered 200 (SPEC 7: "200 once listeners are up"; rebound opens the store, counts
# its tasks and frees stale leases before it binds any port, so neither port answers earlier).
start_rebound() {  # start_rebound NAME STORE_FILE: sets READY_MS, ADMIN
  local name=$1 db=$2 port t0 fd line i
  port=$(free_port)
  ADMIN=$(free_port)
  cat >"$tmp/$name.yaml" <<EOF
listen: 127.0.0.1:$port
admin: 127.0.0.1:$ADMIN
workers: $WORKERS
log_level: warn
drain_timeout: 5s
store: {path: $db}
dependencies:
  hooks:
    hosts: ["127.0.0.1:$NGINX_PORT"]
    context: webhook
EOF
  t0=$(now_us)
  "$REBOUND_BIN" --config "$tmp/$name.yaml" >"$tmp/$name.log" 2>&1 &
  pids[$name]=$!
  for ((i = 0; i < 30000; i++)); do  # 60 s at most
    # The group keeps 2>/dev/null off the shell's own stderr (exec would make it permanent).
    if { exec {fd}<>"/dev/tcp/127.0.0.1/$ADMIN"; } 2>/dev/null; then
      line=
      { printf 'GET /readyz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&"$fd"; } 2>/dev/null || true
      IFS= read -r -t 2 -u "$fd" line || true
      exec {fd}>&-
      if [[ $line == "HTTP/1."?" 200"* ]]; then
        READY_MS=$(awk -v d="$(($(now_us) - t0))" 'BEGIN {printf "%.1f", d / 1000}')
        return 0
      fi
    fi
    kill -0 "${pids[$name]}" 2>/dev/null || die "$name exited during start-up (see $tmp/$name.log)"
    nap 0.002
  done
  die "$name: /readyz did not answer 200 within 60 s"
}

stop_rebound() {  # stop_rebound NAME: SIGTERM; rebound must drain and exit 0
  local t0
  t0=$(now_us)
  stop_proc "$1" 30
  STOP_MS=$((($(now_us) - t0) / 1000))
  [[ $stop_rc == 0 ]] || die "$1 exited $stop_rc on SIGTERM (expected 0; see $tmp/$1.log)"
  [[ ! -s $tmp/$1.log ]] || die "$1 logged at warn or above: $(head -n 3 "$tmp/$1.log")"
}

metric_sum() {  # metric_sum NAME: the sum of a metric's samples on rebound's /metrics
  curl -s --max-time 5 "http://127.0.0.1:$ADMIN/metrics" |
    awk -v m="$1" 'index($0, m "{") == 1 || index($0, m " ") == 1 {n += $NF} END {printf "%d", n}'
}

# ---------------------------------------------------------------------------------------------
# The stores. rebound creates and migrates the file (whatever schema version it is at), then
# the sqlite3 CLI adds the tasks while no rebound holds it.
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
busy_before=$(busy_now)
log "temp dir $tmp; $(nproc) CPUs; load average $load_before${busy_before:+; WARNING: busy: $busy_before}"
start_rebound create "$tmp/empty.db"
stop_rebound create
[[ ! -e $tmp/empty.db-wal ]] || die "rebound left a WAL file next to the store after SIGTERM"
schema_version=$(sqlite3 "$tmp/empty.db" 'PRAGMA user_version')
log "empty store created by rebound (schema version $schema_version)"

seed() {  # seed FILE DUE: copies the empty store to FILE and inserts TASKS tasks
  local file=$1 due=$2 now next
  cp "$tmp/empty.db" "$file"
  now=$(($(now_us) / 1000))
  # Created over the last TASKS ms. Not due: spread over 1 h to 11 h from now (a webhook's
  # R-3 window is 24 h). Due: each is due at its creation, so all are due now, oldest first.
  if [[ $due == due ]]; then next="c"; else next="$now + 3600000 + i * (36000000 / $TASKS)"; fi
  local t0
  t0=$(now_us)
  sqlite3 "$file" >"$tmp/seed.log" 2>&1 <<EOF || die "seeding $file failed: $(cat "$tmp/seed.log")"
PRAGMA cache_size = -500000;
PRAGMA temp_store = MEMORY;
PRAGMA synchronous = OFF;
BEGIN;
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < $TASKS),
-- materialized, so each random value is drawn once and the key in the headers is the row's key
r AS MATERIALIZED (SELECT i, $now - $TASKS + i AS c, lower(hex(randomblob(16))) AS a,
                          lower(hex(randomblob(16))) AS b FROM n),
u AS (SELECT i, c,
             substr(a, 1, 8) || '-' || substr(a, 9, 4) || '-4' || substr(a, 14, 3) || '-8' ||
               substr(a, 18, 3) || '-' || substr(a, 21, 12) AS id,
             substr(b, 1, 8) || '-' || substr(b, 9, 4) || '-4' || substr(b, 14, 3) || '-9' ||
               substr(b, 18, 3) || '-' || substr(b, 21, 12) AS k
      FROM r)
INSERT INTO retry_tasks (id, idempotency_key, dependency, method, target, headers, body, policy_id,
                         attempts, next_attempt_at, created_at, status, lease_owner, lease_expires,
                         window_start, attempts_before)
SELECT id, k, 'hooks', 'POST', 'http://127.0.0.1:$NGINX_PORT/hook',
       CAST('User-Agent' || char(0) || 'bench-seed/1' || char(0) ||
            'Content-Type' || char(0) || 'application/json' || char(0) ||
            'Idempotency-Key' || char(0) || k || char(0) ||
            'Via' || char(0) || '1.1 rebound (00000000)' || char(0) ||
            'Host' || char(0) || '127.0.0.1:$NGINX_PORT' || char(0) AS BLOB),
       CAST('{"event":"invoice.paid","id":' || i || '}' AS BLOB),
       '', 0, $next, c, 'PENDING', NULL, NULL, 0, 0
FROM u;
COMMIT;
EOF
  [[ ! -e $file-wal ]] || die "the sqlite3 CLI left a WAL file next to $file"
  log "seeded $file: $(thousands "$TASKS") tasks ($due) in $((($(now_us) - t0) / 1000)) ms, $(($(stat -c %s "$file") / 1048576)) MiB"
}
seed "$tmp/pending.db" not-due
((DELIVER_RUNS == 0)) || seed "$tmp/due.db" due
got=$(sqlite3 "$tmp/pending.db" "SELECT count(*), count(DISTINCT idempotency_key), sum(instr(hex(headers), hex(idempotency_key)) > 0) FROM retry_tasks WHERE status = 'PENDING'")
[[ $got == "$TASKS|$TASKS|$TASKS" ]] || die "seeded store looks wrong: count|distinct keys|key in headers = $got"

# What rebound's start-up runs on the file, timed in the CLI on the seeded store (warm cache):
# sqlite_store's constructor counts the tasks by status once and frees stale leases.
sql_timed() {  # sql_timed FILE SQL: milliseconds (the CLI's .timer, real)
  printf '.timer on\n%s\n' "$2" | sqlite3 "$1" | awk '/^Run Time:/ {t += $4} END {printf "%.0f", t * 1000}'
}
count_sql="SELECT status, count(*) FROM retry_tasks GROUP BY status;"
count_ms=$(sql_timed "$tmp/pending.db" "$count_sql")
count_plan=$(sqlite3 "$tmp/pending.db" "EXPLAIN QUERY PLAN $count_sql" | sed -n 's/^[`|]--//p' | tr '\n' ' ')
file_mib() { echo $(($(stat -c %s "$1") / 1048576)); }
pending_mib=$(file_mib "$tmp/pending.db")
empty_kib=$(($(stat -c %s "$tmp/empty.db") / 1024))

# ---------------------------------------------------------------------------------------------
# Idle starts: empty store and TASKS pending (none due), alternating which goes first. One
# unrecorded start of each first, so both files are read from the page cache alike.
declare -A ready=() rss=() hwm=() threads=()
idle_start() {  # idle_start KIND ROUND (ROUND 0: warm-up, not recorded)
  local kind=$1 round=$2 name=$1-$2
  start_rebound "$name" "$tmp/$kind.db"
  local r=$READY_MS
  sleep "$SETTLE"  # the scheduler's first claim, purge pass and count have run
  local pid=${pids[$name]}
  local v h t
  v=$(status_kib "$pid" VmRSS); h=$(status_kib "$pid" VmHWM); t=$(status_kib "$pid" Threads)
  stop_rebound "$name"
  log "$kind start $round: ready in $r ms, VmRSS $(mib "$v") MiB, VmHWM $(mib "$h") MiB, $t threads, stopped in $STOP_MS ms"
  ((round > 0)) || return 0
  ready[$kind]+="$r "; rss[$kind]+="$v "; hwm[$kind]+="$h "; threads[$kind]=$t
}
idle_start empty 0
idle_start pending 0
for ((round = 1; round <= RUNS; round++)); do
  if ((round % 2)); then order=(empty pending); else order=(pending empty); fi
  for kind in "${order[@]}"; do idle_start "$kind" "$round"; done
done
[[ $(sqlite3 "$tmp/pending.db" "SELECT count(*) FROM retry_tasks WHERE status = 'PENDING'") == "$TASKS" ]] ||
  die "tasks that were not due left PENDING during the idle starts"

# ---------------------------------------------------------------------------------------------
# Delivering: every task due now, against nginx. Memory is sampled each second for
# DELIVER_SECONDS; the scheduler holds at most 64 tasks, so it should not follow the backlog.
: >"$tmp/samples.tsv"
declare -a d_ready=() d_rate=() d_first=() d_last=() d_max=() d_hwm=() d_wal=() d_left=()
d_delivered_total=0
d_seen=0
for ((run = 1; run <= DELIVER_RUNS; run++)); do
  name=deliver-$run
  rm -f "$tmp/deliver.db" "$tmp/deliver.db-wal"
  cp "$tmp/due.db" "$tmp/deliver.db"
  sleep 1.5  # nginx's log flushes each second: count from here
  seen_before=$(wc -l <"$tmp/nginx/access.log" 2>/dev/null || echo 0)
  start_rebound "$name" "$tmp/deliver.db"
  d_ready+=("$READY_MS")
  pid=${pids[$name]}
  t0=$(now_us)
  samples=()
  for ((s = 1; s <= DELIVER_SECONDS; s++)); do
    nap "$(awk -v t="$((t0 + s * 1000000 - $(now_us)))" 'BEGIN {printf "%.3f", (t > 0 ? t : 0) / 1e6}')"
    kill -0 "$pid" 2>/dev/null || die "$name exited while delivering (see $tmp/$name.log)"
    v=$(status_kib "$pid" VmRSS)
    samples+=("$v")
    printf '%d\t%d\t%s\t%s\n' "$run" "$s" "$v" "$(metric_sum retry_task_age_seconds_count)" >>"$tmp/samples.tsv"
  done
  elapsed_us=$(($(now_us) - t0))
  delivered=$(metric_sum retry_task_age_seconds_count)  # tasks ended, as rebound counts them
  dead=$(metric_sum dlq_messages_total)
  h=$(status_kib "$pid" VmHWM)
  wal=$(stat -c %s "$tmp/deliver.db-wal" 2>/dev/null || echo 0)
  stop_rebound "$name"
  left=$(sqlite3 "$tmp/deliver.db" "SELECT count(*) FROM retry_tasks WHERE status IN ('PENDING', 'IN_FLIGHT')")
  ok=$(sqlite3 "$tmp/deliver.db" "SELECT count(*) FROM retry_tasks WHERE status = 'SUCCEEDED'")
  sleep 1.5
  seen=$(($(wc -l <"$tmp/nginx/access.log") - seen_before))
  non200=$(tail -n "$seen" "$tmp/nginx/access.log" | grep -vc '^200$' || true)
  ((dead == 0)) || die "$name: $dead tasks were dead-lettered (nginx answers 200 to all)"
  ((non200 == 0)) || die "$name: nginx answered $non200 deliveries with something else than 200"
  ((delivered > 0)) || die "$name: nothing was delivered in ${DELIVER_SECONDS}s"
  max=$(printf '%s\n' "${samples[@]}" | sort -n | tail -n 1)
  d_rate+=("$((delivered * 1000000 / elapsed_us))")
  d_first+=("${samples[0]}"); d_last+=("${samples[-1]}"); d_max+=("$max"); d_hwm+=("$h")
  d_wal+=("$wal"); d_left+=("$left")
  d_delivered_total=$((d_delivered_total + ok)); d_seen=$((d_seen + seen))
  log "deliver $run: ready in $READY_MS ms, $delivered delivered in $((elapsed_us / 1000)) ms ($((delivered * 1000000 / elapsed_us))/s), VmRSS 1 s $(mib "${samples[0]}") -> end $(mib "${samples[-1]}") MiB (max $(mib "$max"), VmHWM $(mib "$h")), WAL $((wal / 1048576)) MiB, $left left, stopped in $STOP_MS ms"
done
stop_proc nginx 5

# ---------------------------------------------------------------------------------------------
# The report
busy_after=$(busy_now)
busy=$(printf '%s\n' "$busy_before" "$busy_after" | awk 'NF' | sort -u | paste -sd ';' - | sed 's/;/; /g')
rebound_version=$("$REBOUND_BIN" --version 2>/dev/null | head -n 1 || true)
rebound_rev=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo "no commit")
if ! git -C "$root" diff --quiet HEAD -- 2>/dev/null; then rebound_rev+=" + uncommitted changes"; fi
# shellcheck disable=SC2086  # split on purpose
med() { median $1; }  # med "space separated values"
{
  e_ready=$(med "${ready[empty]}"); p_ready=$(med "${ready[pending]}")
  e_rss=$(med "${rss[empty]}"); p_rss=$(med "${rss[pending]}")
  e_hwm=$(med "${hwm[empty]}"); p_hwm=$(med "${hwm[pending]}")
}
N=$(thousands "$TASKS")
echo "## rebound with $N tasks pending in its store (issue 17)"
echo
echo "- $(date -u '+%Y-%m-%d %H:%M UTC'), $(uname -sr), $(nproc) CPUs ($(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)); rebound ${rebound_version:-unknown version} ($rebound_rev, $REBOUND_SRC_BIN), workers: $WORKERS, store schema version $schema_version, SQLite $(sqlite3 --version | cut -d' ' -f1), store on $(df --output=fstype "$tmp" | tail -n 1) under $(dirname "$tmp")"
echo "- start-up: from fork+exec until the admin \`/readyz\` answers 200 (polled every 2 ms), warm page cache; memory: VmRSS ${SETTLE}s after ready, and VmHWM; $RUNS starts per store, alternating order, after one unrecorded start of each"
echo "- load average before: $load_before${busy:+; **other busy processes were running: $busy** (timings are noisy)}"
echo
echo "| measure | empty store | $N pending (none due) | pending / empty |"
echo "|---|---:|---:|---:|"
echo "| start-up to /readyz 200, median (ms) | $e_ready | $p_ready | $(ratio "$p_ready" "$e_ready") |"
echo "| start-up per run (ms) | ${ready[empty]% } | ${ready[pending]% } | |"
echo "| VmRSS after start, median (MiB) | $(mib "$e_rss") | $(mib "$p_rss") | $(ratio "$p_rss" "$e_rss") |"
echo "| VmHWM, median (MiB) | $(mib "$e_hwm") | $(mib "$p_hwm") | $(ratio "$p_hwm" "$e_hwm") |"
echo "| threads | ${threads[empty]} | ${threads[pending]} | |"
echo "| store file | $empty_kib KiB | $pending_mib MiB | |"
echo
if ((DELIVER_RUNS > 0)); then
  echo "Delivering: the same $N tasks all due at start, delivered to nginx (\`return 200\`) for ${DELIVER_SECONDS}s, $DELIVER_RUNS runs each on a fresh copy of the store (medians; VmRSS sampled each second):"
  echo
  echo "| measure | median | per run |"
  echo "|---|---:|---|"
  echo "| start-up to /readyz 200 (ms) | $(median "${d_ready[@]}") | ${d_ready[*]} |"
  echo "| deliveries/s (tasks ended, rebound's count) | $(median "${d_rate[@]}") | ${d_rate[*]} |"
  row() { local label=$1; shift; local m l="" x; m=$(median "$@"); for x in "$@"; do l+="$(mib "$x") "; done; echo "| $label (MiB) | $(mib "$m") | ${l% } |"; }
  row "VmRSS after 1 s" "${d_first[@]}"
  row "VmRSS after ${DELIVER_SECONDS} s" "${d_last[@]}"
  row "VmRSS, highest sample" "${d_max[@]}"
  row "VmHWM at the end" "${d_hwm[@]}"
  wal_mib=(); for x in "${d_wal[@]}"; do wal_mib+=("$((x / 1048576))"); done
  echo "| WAL file at the end (MiB) | $(median "${wal_mib[@]}") | ${wal_mib[*]} |"
  echo "| tasks still pending at the end | $(median "${d_left[@]}") | ${d_left[*]} |"
  echo
  echo "VmRSS each second (MiB), run 1: $(awk -F'\t' '$1 == 1 {printf "%s%.1f", sep, $3 / 1024; sep = ", "}' "$tmp/samples.tsv")."
  echo "nginx answered 200 to all $(thousands "$d_seen") deliveries; the stores hold $(thousands "$d_delivered_total") SUCCEEDED tasks; none dead-lettered."
  echo
fi
echo "On the seeded file, rebound's start-up count (\`$count_sql\`) takes $count_ms ms in the sqlite3 CLI (warm cache; plan: ${count_plan% }). rebound exited 0 on every SIGTERM. Bench time: $(($(date +%s) - bench_started)) s."
status=0
