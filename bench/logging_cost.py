#!/usr/bin/env python3
"""What logging at info costs in throughput, against logging off (issue 6: under 5%).

usage: logging_cost.py [REBOUND_BINARY] [SECONDS] [ROUNDS]   (defaults: build/rebound, 10, 5)

wrk -> rebound -> nginx on 127.0.0.1, rebound on the same config started with `--log-level info`
or `--log-level off`, a fresh process for every measurement, the two levels in alternating
order each round (so drift in the machine's load hits both). Two workloads:

  success   GET of a 1 KiB file: rebound logs nothing per request at info (the quiet path)
  retried   GET of a path nginx always answers 503, `max_retries: 1` with 1-2 ms backoff and
            a budget large enough never to refuse: every request makes two attempts and
            writes two log lines (`retry_attempt` at info, `retry_exhausted` at warn), the
            heaviest logging a request can cause

The info process's stdout goes to a file, as a container runtime's log capture would take it.
Prints a Markdown table of median req/s per workload and level and the ratio info/off.
Needs wrk and nginx (scripts/install-deps --bench). Standard library only.
"""
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, name):
    for _ in range(200):
        if proc.poll() is not None:
            sys.exit(f"logging_cost: {name} exited during start-up")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"logging_cost: {name} did not listen on {port}")


def start_nginx(tmp):
    port = free_port()
    root = os.path.join(tmp, "nginx")
    os.makedirs(os.path.join(root, "html"))
    with open(os.path.join(root, "html", "index.html"), "w") as f:
        f.write("x" * 1024)
    os.chmod(tmp, 0o755)
    for dirpath, dirnames, filenames in os.walk(root):
        os.chmod(dirpath, 0o755)
        for n in filenames:
            os.chmod(os.path.join(dirpath, n), 0o644)
    temp_paths = "".join(f"  {m}_temp_path {root}/{m};\n" for m in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    conf = os.path.join(root, "nginx.conf")
    with open(conf, "w") as f:
        f.write(f"""worker_processes 1;
daemon off;
pid {root}/nginx.pid;
error_log {root}/error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
{temp_paths}  keepalive_timeout 75s;
  keepalive_requests 10000000;
  server {{
    listen 127.0.0.1:{port};
    root {root}/html;
    location = /fail {{ return 503 "busy"; }}
  }}
}}
""")
    proc = subprocess.Popen(["nginx", "-p", root, "-e", f"{root}/error.log", "-c", conf],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port, proc, "nginx")
    return proc, port


def start_rebound(binary, tmp, level, upstream):
    port, admin = free_port(), free_port()
    config = os.path.join(tmp, f"rebound-{level}.yaml")
    with open(config, "w") as f:
        f.write(f"""listen: 127.0.0.1:{port}
admin: 127.0.0.1:{admin}
workers: 1
dependencies:
  nginx:
    hosts: ["{upstream}"]
    max_retries: 1
    backoff: {{base: 1ms, cap: 2ms}}
    budget: {{min_retries: 1000000, window: 1s}}
    circuit_breaker: {{mode: off}}
""")
    log = open(os.path.join(tmp, f"rebound-{level}-{port}.log"), "w")
    proc = subprocess.Popen([binary, "--config", config, "--log-level", level], stdout=log, stderr=subprocess.STDOUT)
    wait_port(port, proc, f"rebound ({level})")
    return proc, port, log


def run_wrk(proxy_port, url, seconds):
    env = dict(os.environ, BENCH_TARGET_URL=url)
    out = subprocess.run(["wrk", "-t2", "-c64", f"-d{seconds}s", "-s", os.path.join(HERE, "wrk-report.lua"),
                          f"http://127.0.0.1:{proxy_port}/"], env=env, capture_output=True, text=True,
                         timeout=seconds + 60)
    m = re.search(r"^BENCH (.*)$", out.stdout, re.M)
    if not m:
        sys.exit(f"logging_cost: wrk printed no result: {out.stdout[-500:]} {out.stderr[-500:]}")
    r = dict(kv.split("=") for kv in m.group(1).split())
    if int(r["connect"]) + int(r["read"]) + int(r["write"]) + int(r["timeout"]):
        print(f"logging_cost: WARNING: wrk socket errors: {m.group(1)}", file=sys.stderr)
    return int(r["requests"]) * 1e6 / int(r["duration_us"])


def main():
    binary = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build/rebound")
    seconds = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    for tool in ("wrk", "nginx"):
        if not shutil.which(tool, path=os.environ.get("PATH", "") + ":/usr/sbin"):
            sys.exit(f"logging_cost: {tool} not found (scripts/install-deps --bench)")
    os.environ["PATH"] += ":/usr/sbin"
    tmp = tempfile.mkdtemp(prefix="rebound-logcost-")
    procs = []
    try:
        nginx, nginx_port = start_nginx(tmp)
        procs.append(nginx)
        upstream = f"127.0.0.1:{nginx_port}"
        workloads = {"success": f"http://{upstream}/index.html", "retried": f"http://{upstream}/fail"}
        levels = ("info", "off")
        results = {(w, l): [] for w in workloads for l in levels}
        lines = 0
        # A fresh process per measurement: two long-lived processes differ by several percent
        # whatever they log (placement, caches), more than the effect measured here.
        for w, url in workloads.items():
            for r in range(rounds):
                for level in (levels if r % 2 == 0 else levels[::-1]):
                    proc, port, log = start_rebound(binary, tmp, level, upstream)
                    try:
                        run_wrk(port, url, 1)  # warm-up, unrecorded
                        rps = run_wrk(port, url, seconds)
                    finally:
                        proc.terminate()
                        proc.wait(timeout=20)
                        log.close()
                    if level == "info":
                        lines += sum(1 for _ in open(log.name))
                    results[(w, level)].append(rps)
                    print(f"logging_cost: {w} {level} round {r + 1}: {rps:,.0f} req/s", file=sys.stderr)
        print(f"wrk -t2 -c64, {rounds} rounds of {seconds} s per workload and level, alternating order; "
              f"rebound workers: 1. Median req/s:\n")
        print("| workload | log lines per request | info | off | info / off |")
        print("|---|---:|---:|---:|---:|")
        for w in workloads:
            info, off = statistics.median(results[(w, "info")]), statistics.median(results[(w, "off")])
            per = "0" if w == "success" else "2"
            print(f"| {w} | {per} | {info:,.0f} | {off:,.0f} | {info / off:.3f} |")
        print(f"\nThe info processes wrote {lines:,} log lines in all. The success row logs nothing at either "
              "level: its ratio is the noise between two runs of the same work.")
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
