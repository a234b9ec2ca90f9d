#!/usr/bin/env bash
# bench/dns.sh: what resolving upstream names costs (issue 50). wrk -> rebound -> nginx, where
# nginx closes every connection after its answer (keepalive_timeout 0), so every request opens
# a new upstream connection and needs the name's addresses: the worst case for resolution (a
# pooled connection needs none). One rebound worker; a DNS server in Python on 127.0.0.1 answers
# every *.bench name with 127.0.0.1 (TTL 300). Targets, each a round of DURATION seconds, ROUNDS
# rounds alternating, medians:
#   ip        http://127.0.0.1:P/     no lookup at all: the control
#   localhost http://localhost:P/     a name from /etc/hosts: what a binary before c-ares looked
#                                     up with getaddrinfo on every connection
#   cached    http://svc.bench:P/     one name from the DNS server, kept for its TTL
#   distinct  http://nI.bench:P/      1,000 distinct names in turn (each asked once, then kept)
# Usage: bench/dns.sh [rebound] [older rebound to compare: ip and localhost only]; DURATION (5),
# ROUNDS (3), CONNS (16).
set -euo pipefail
BIN=$(realpath "${1:-build/rebound}"); OLD=${2:+$(realpath "$2")}
DURATION=${DURATION:-5}; ROUNDS=${ROUNDS:-3}; CONNS=${CONNS:-16}
NGINX_KEEPALIVE="keepalive_timeout 0;" source "$(dirname "$0")/one_hop.sh"
DNS=$(port)
python3 - "$DNS" >"$W/dns.log" 2>&1 <<'PY' & pids+=($!)
import socket, struct, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1", int(sys.argv[1])))
while True:
    q, peer = s.recvfrom(1500)
    at, labels = 12, []
    while q[at]:
        labels.append(q[at + 1:at + 1 + q[at]].decode().lower()); at += 1 + q[at]
    qtype = struct.unpack("!H", q[at + 1:at + 3])[0]; end = at + 5
    name = ".".join(labels)
    known = name.endswith(".bench")
    answers = [b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 300, 4) + socket.inet_aton("127.0.0.1")] if known and qtype == 1 else []
    flags = 0x8180 | (0 if known else 3)
    s.sendto(q[:2] + struct.pack("!HHHHH", flags, 1, len(answers), 0, 0) + q[12:end] + b"".join(answers), peer)
PY
cat >"$W/targets.lua" <<'LUA'
local kind, port, i = os.getenv("KIND"), os.getenv("NG"), 0
request = function()
  local host = ({ip = "127.0.0.1", localhost = "localhost", cached = "svc.bench"})[kind]
  if kind == "distinct" then i = (i + 1) % 1000; host = "n" .. i .. ".bench" end
  return wrk.format("GET", "http://" .. host .. ":" .. port .. "/", {Host = host .. ":" .. port})
end
LUA
run_round() {  # binary kind -> requests per second
  local bin=$1 kind=$2 rb rba
  rb=$(port); rba=$(port)
  printf 'listen: 127.0.0.1:%s\nadmin: 127.0.0.1:%s\nworkers: 1\ndns:\n  servers: ["127.0.0.1:%s"]\n' "$rb" "$rba" "$DNS" >"$W/rb.yaml"
  # An older binary knows no dns: key: it gets the file without it.
  if [[ "$bin" == "$OLD" ]]; then head -3 "$W/rb.yaml" >"$W/rb_old.yaml"; mv "$W/rb_old.yaml" "$W/rb.yaml"; fi
  "$bin" --config "$W/rb.yaml" --log-level error >/dev/null 2>&1 & local pid=$!
  for _ in $(seq 50); do curl -sf "http://127.0.0.1:$rba/readyz" >/dev/null && break; sleep 0.1; done
  KIND=$kind NG=$NG wrk -t1 -c"$CONNS" -d"${DURATION}s" -s "$W/targets.lua" "http://127.0.0.1:$rb/" 2>/dev/null |
    awk '/^Requests\/sec/ {print int($2)} /Non-2xx/ {print "non-2xx " $4 > "/dev/stderr"}'
  kill "$pid"; wait "$pid" 2>/dev/null || true
}
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
declare -A results
kinds=(ip localhost cached distinct)
for r in $(seq "$ROUNDS"); do
  for k in "${kinds[@]}"; do
    results[new_$k]+="$(run_round "$BIN" "$k") "
    if [[ -n "$OLD" && ( $k == ip || $k == localhost ) ]]; then results[old_$k]+="$(run_round "$OLD" "$k") "; fi
  done
done
printf '| target | rebound req/s (new connections/s) |%s\n' "${OLD:+ older binary |}"
printf '|---|---:|%s\n' "${OLD:+---:|}"
for k in "${kinds[@]}"; do
  n=$(tr ' ' '\n' <<<"${results[new_$k]}" | grep . | median)
  o=""; [[ -n "$OLD" && -n "${results[old_$k]:-}" ]] && o=" $(tr ' ' '\n' <<<"${results[old_$k]}" | grep . | median) |"
  printf '| %s | %s |%s\n' "$k" "$n" "${o:+$o}"
done
