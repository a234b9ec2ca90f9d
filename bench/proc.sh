# Process bookkeeping shared by the bench scripts (run.sh, soak.sh, async*.sh, inbound.sh).
# Sourced, not run: the caller defines log() and die() and a `pids` associative array (name ->
# pid of what it started).

stop_proc() {  # stop_proc NAME [GRACE_SECONDS]: SIGTERM, wait, SIGKILL; sets stop_rc
  local name=$1 grace=${2:-5} pid=${pids[$1]:-} i
  stop_rc=
  [[ -n $pid ]] || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < grace * 10; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    log "$name (pid $pid) still running ${grace}s after SIGTERM; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  stop_rc=0
  wait "$pid" 2>/dev/null || stop_rc=$?
  unset "pids[$name]"
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

wait_port() {  # wait_port NAME PORT: until something accepts on 127.0.0.1:PORT (10 s)
  local name=$1 port=$2 i
  for ((i = 0; i < 100; i++)); do
    kill -0 "${pids[$name]}" 2>/dev/null || die "$name exited during startup (see $tmp/$name.log)"
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  die "$name did not listen on 127.0.0.1:$port within 10 s"
}

cpu_ticks() {  # utime+stime of PID (all its threads), in clock ticks
  local s f
  s=$(<"/proc/$1/stat")
  s=${s##*) }  # drop "pid (comm) "; comm may contain spaces
  read -r -a f <<<"$s"
  echo $((f[11] + f[12]))  # fields 14 and 15 of stat(5), counted from field 3
}

start_nginx_app() {  # start_nginx_app PORT ACCESS_LOG LOCATION: a one-worker nginx on 127.0.0.1:PORT as
  # pids[nginx], its files under $tmp/nginx; ACCESS_LOG is its access_log directive (the format
  # `bare` logs one status per line), LOCATION the body of `location /`.
  local port=$1 access=$2 location=$3
  mkdir -p "$tmp/nginx"
  cat >"$tmp/nginx/nginx.conf" <<EOF
worker_processes 1;
daemon off;
pid $tmp/nginx/nginx.pid;
error_log $tmp/nginx/error.log warn;
events { worker_connections 4096; }
http {
  log_format bare "\$status";
  $access
  client_body_temp_path $tmp/nginx/body;
  keepalive_requests 10000000;
  server {
    listen 127.0.0.1:$port;
    location / { $location }
  }
}
EOF
  nginx -p "$tmp/nginx" -e "$tmp/nginx/error.log" -c "$tmp/nginx/nginx.conf" >"$tmp/nginx.log" 2>&1 &
  pids[nginx]=$!
  wait_port nginx "$port"
}
