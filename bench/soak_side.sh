#!/usr/bin/env bash
# The soak's side loads (issue 29), beside bench/soak.py's HTTP/1.1 load: gRPC unary and
# server-streaming calls through the proxy port from a real grpcio client to a real grpcio
# server (integration/grpc_peer.py), a share of them cancelled by their client, and keyed POSTs
# through the inbound gate, each sent twice (the second is a replay). Runs until DEADLINE
# (seconds since the epoch); appends one line per call batch to OUT ("KIND code=N").
#
#   soak_side.sh PROXY_PORT INBOUND_PORT DEADLINE OUT
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
peer="$here/../integration/grpc_peer.py"
proxy=$1 inbound=$2 deadline=$3 out=$4
py=/usr/bin/python3  # Debian's, with python3-grpcio

code_of() { grep -o '"code": *-\{0,1\}[0-9]*' | head -n 1 | grep -o -- '-\{0,1\}[0-9]*$' || echo none; }
call() {  # call KIND ARGS...: one grpc_peer.py call through rebound
  local kind=$1
  shift
  echo "$kind code=$("$py" "$peer" call "127.0.0.1:$proxy" "$@" --meta x-authority=grpc.soak 2>/dev/null | code_of)" >>"$out"
}

n=0
while (($(date +%s) < deadline)); do
  n=$((n + 1))
  call grpc_unary_x20 /test.Peer/Echo --concurrent 20 --timeout 10
  # Cancelled by their client mid-call: nobody's failure (no breaker record, no retry).
  call grpc_cancelled_x5 /test.Peer/Slow --meta x-sleep-ms=300 --cancel-after 0.05 --calls 5
  call grpc_stream /test.Peer/Count --kind server-stream --payload 50 --timeout 10
  for i in 1 2 3 4 5; do
    for attempt in first replay; do
      status=$(curl -sS --noproxy '*' --max-time 10 -o /dev/null -w '%{http_code}' -X POST \
        -H "Idempotency-Key: soak-$n-$i" -H 'Content-Type: application/json' --data "{\"n\":$n}" \
        "http://127.0.0.1:$inbound/upload/keyed" 2>/dev/null || echo 000)
      echo "inbound_$attempt code=$status" >>"$out"
    done
  done
done
