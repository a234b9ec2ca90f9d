# one_hop.sh: sourced by bench/per_request.sh and bench/instructions.sh: the one-hop rig both
# measure, wrk -> rebound -> nginx on 127.0.0.1, with nginx serving 1 KiB and rebound routing
# Host `bench.local` to it. Sets W (a temp dir removed on exit), pids (killed on exit), NG, RB
# and RBA (ports), writes $W/rebound.yaml with T workers (default 1), and starts nginx
# (NGINX_KEEPALIVE: its keep-alive directive; `keepalive_timeout 0;` closes after each answer;
# PERF_BODY: the answer's size in bytes, 1024; /post answers a POST with 2 bytes).
W=$(mktemp -d); chmod 755 "$W"; pids=()
one_hop_cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$W"; }
trap one_hop_cleanup EXIT
port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
NG=$(port); RB=$(port); RBA=$(port)
mkdir -p "$W/html" "$W/ng"; head -c "${PERF_BODY:-1024}" /dev/zero | tr '\0' x >"$W/html/index.html"
cat >"$W/nginx.conf" <<NG
worker_processes 1; daemon off; pid $W/ng/pid; error_log $W/ng/err.log;
events { worker_connections 4096; }
http { access_log off; ${NGINX_KEEPALIVE:-keepalive_requests 1000000;} client_body_temp_path $W/ng; proxy_temp_path $W/ng;
  fastcgi_temp_path $W/ng; uwsgi_temp_path $W/ng; scgi_temp_path $W/ng;
  server { listen 127.0.0.1:$NG; root $W/html; location / { index index.html; }
    location = /post { return 200 "ok"; } } }
NG
cat >"$W/rebound.yaml" <<RBY
listen: 127.0.0.1:$RB
admin: 127.0.0.1:$RBA
service: bench
workers: ${T:-1}
dependencies:
  bench:
    hosts: [bench.local]
    origin: http://127.0.0.1:$NG
RBY
nginx -c "$W/nginx.conf" -p "$W" >/dev/null 2>&1 & pids+=($!)
