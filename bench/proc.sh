# Process bookkeeping shared by bench/run.sh and bench/soak.sh. Sourced, not run: the caller
# defines log() and die() and a `pids` associative array (name -> pid of what it started).

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
