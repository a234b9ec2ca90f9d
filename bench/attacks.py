#!/usr/bin/python3
"""Issue 29's memory attacks, measured: the peak RSS (VmHWM) of the process under attack, for
rebound (one binary or two, to compare a fix with what came before) and for nginx set up to
do the same job. Each attack runs against a fresh process.

  bench/attacks.py [--rebound BIN]... [--nginx] [ATTACK...]

Attacks (all by default):
  h2-bodies     5 HTTP/2 connections x 100 streams whose request bodies never end, sent for
                as long as the server grants flow-control credit (10 s)
  zero-window   3 HTTP/2 connections x 100 calls of 1 MiB whose answers the client never
                opens a window for (4 s)
  admin-noauth  200 connections each POSTing a 2 MiB body to the admin API without its token
  retry-buffer  400 concurrent 1 MiB PUTs to an upstream that answers after 6 s

nginx does the same jobs its own way: an h2c listener proxying to the same upstreams, a
static 1 MiB answer, auth_basic in front of a location, a reverse proxy with request
buffering. Standard library and Debian's python3-h2 (through integration/h2_attack.py).
"""
import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)
sys.path.insert(0, here)
from http_bench import content_length, free_port  # noqa: E402

PY = "/usr/bin/python3"  # Debian's, with python3-h2
attack_script = os.path.join(root, "integration", "h2_attack.py")
h2_peer = os.path.join(root, "integration", "h2_peer.py")


def peak_kib(pids):
    total = 0
    for pid in pids:
        try:
            with open("/proc/%d/status" % pid) as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


def wait_port(port, seconds=10):
    import socket
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit("nothing listens on %d" % port)


class Proc:
    def __init__(self, argv, workdir, **kw):
        self.log = open(os.path.join(workdir, "%s.%d.log" % (os.path.basename(argv[0]), time.monotonic_ns())), "w")
        self.p = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, **kw)

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGKILL)
            self.p.wait()
        self.log.close()


class H2Upstream:
    def __init__(self, workdir):
        port_file = os.path.join(workdir, "h2-peer-port")
        self.proc = Proc([PY, h2_peer, port_file], workdir)
        for _ in range(100):
            if os.path.exists(port_file):
                break
            time.sleep(0.05)
        self.port = int(open(port_file).read())


async def slow_http_upstream(port, delay):
    """HTTP/1.1: reads each request whole, answers 200 after `delay` seconds."""
    async def handle(reader, writer):
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                await reader.readexactly(content_length(head))
                await asyncio.sleep(delay)
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
    return await asyncio.start_server(handle, "127.0.0.1", port, backlog=1024)


def start_rebound(binary, workdir, extra):
    port, admin = free_port(), free_port()
    cfg = os.path.join(workdir, "rebound.yaml")
    with open(cfg, "w") as f:
        f.write("listen: 127.0.0.1:%d\nadmin: %s\nworkers: 2\nlog_level: warn\n%s" % (port, admin_spec(workdir, admin), extra))
    proc = Proc([binary, "--config", cfg], workdir)
    wait_port(port)
    return proc, port, admin


def admin_spec(workdir, admin):
    token = os.path.join(workdir, "admin-token")
    with open(token, "w") as f:
        f.write("s3cret\n")
    os.chmod(token, 0o600)
    return "{listen: 127.0.0.1:%d, token_file: %s}" % (admin, token)


def start_nginx(workdir, server_block):
    conf = os.path.join(workdir, "nginx.conf")
    with open(conf, "w") as f:
        f.write("""daemon off; worker_processes 1; pid %s/nginx.pid; error_log %s/nginx-error.log;
events { worker_connections 4096; }
http { access_log off; client_body_temp_path %s/body; proxy_temp_path %s/proxy;
  server { %s } }
""" % (workdir, workdir, workdir, workdir, server_block))
    proc = Proc(["/usr/sbin/nginx", "-c", conf, "-p", workdir], workdir)
    time.sleep(0.3)
    return proc


def nginx_pids(proc):
    out = subprocess.run(["pgrep", "-P", str(proc.p.pid)], capture_output=True, text=True).stdout.split()
    return [proc.p.pid] + [int(p) for p in out]


def run_h2_attackers(n, args, seconds):
    """Starts n attackers; returns them once each wrote its done file (or `seconds` + 20 passed)."""
    procs, done = [], []
    for i in range(n):
        d = tempfile.mkdtemp()
        done.append(os.path.join(d, "done"))
        procs.append(subprocess.Popen([PY, attack_script] + args(done[-1]),
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    end = time.monotonic() + seconds + 20
    while time.monotonic() < end and not all(os.path.exists(d) for d in done):
        time.sleep(0.1)
    return procs


def h2_bodies(target, workdir):
    up = H2Upstream(workdir)
    if target == "nginx":
        port = free_port()
        server = start_nginx(workdir, "listen 127.0.0.1:%d http2; location / { proxy_pass http://127.0.0.1:%d; }"
                             % (port, up.port))
        pids = lambda: nginx_pids(server)  # noqa: E731
    else:
        server, port, _ = start_rebound(target, workdir, "dependencies:\n  peer:\n    hosts: [peer.test]\n"
                                        "    origin: http://127.0.0.1:%d\n    context: grpc\n" % up.port)
        pids = lambda: [server.p.pid]  # noqa: E731
    attackers = run_h2_attackers(5, lambda d: ["hold-bodies", str(port), "peer.test", "/peer.Svc/Hold", "100", "10", d], 10)
    peak = peak_kib(pids())
    for a in attackers:
        a.kill()
    server.stop()
    up.proc.stop()
    return peak


def zero_window(target, workdir):
    up = H2Upstream(workdir)
    if target == "nginx":
        port = free_port()
        with open(os.path.join(workdir, "answer"), "wb") as f:
            f.write(b"a" * (1 << 20))
        server = start_nginx(workdir, "listen 127.0.0.1:%d http2; root %s; location / { try_files /answer =404; }"
                             % (port, workdir))
        pids = lambda: nginx_pids(server)  # noqa: E731
    else:
        server, port, _ = start_rebound(target, workdir, "dependencies:\n  peer:\n    hosts: [peer.test]\n"
                                        "    origin: http://127.0.0.1:%d\n    context: grpc\n" % up.port)
        pids = lambda: [server.p.pid]  # noqa: E731
    procs = [subprocess.Popen([PY, attack_script, "zero-window", str(port), "peer.test", "/peer.Svc/Echo",
                               "100", "4", str(1 << 20)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for _ in range(3)]
    for p in procs:
        p.wait()
    peak = peak_kib(pids())
    server.stop()
    up.proc.stop()
    return peak


async def post_bodies(port, n, path, body_size, extra=b"", host=b"x"):
    async def one():
        try:
            r, w = await asyncio.open_connection("127.0.0.1", port)
            w.write(b"POST " + path + b" HTTP/1.1\r\nHost: " + host + b"\r\nContent-Type: application/json\r\n" + extra +
                    b"Content-Length: %d\r\n\r\n" % body_size)
            chunk = b"x" * 65536
            sent = 0
            while sent < body_size:
                w.write(chunk[:min(len(chunk), body_size - sent)])
                sent += min(len(chunk), body_size - sent)
                await w.drain()
            await asyncio.wait_for(r.read(100), 10)
            w.close()
        except (ConnectionError, asyncio.TimeoutError, OSError):
            pass
    await asyncio.gather(*(one() for _ in range(n)))


def admin_noauth(target, workdir):
    if target == "nginx":
        port = free_port()
        with open(os.path.join(workdir, "htpasswd"), "w") as f:
            f.write("u:{PLAIN}p\n")
        server = start_nginx(workdir, "listen 127.0.0.1:%d; client_max_body_size 8m; location / { auth_basic x; "
                             "auth_basic_user_file %s/htpasswd; return 204; }" % (port, workdir))
        pids = lambda: nginx_pids(server)  # noqa: E731
    else:
        store = os.path.join(workdir, "rebound.db")
        server, _, port = start_rebound(target, workdir, "store: {path: %s}\n" % store)
        pids = lambda: [server.p.pid]  # noqa: E731
    asyncio.run(post_bodies(port, 200, b"/retry-tasks", 2 << 20))
    peak = peak_kib(pids())
    server.stop()
    return peak


def retry_buffer(target, workdir):
    async def go():
        up_port = free_port()
        up = await slow_http_upstream(up_port, 6)
        if target == "nginx":
            port = free_port()
            server = start_nginx(workdir, "listen 127.0.0.1:%d; client_max_body_size 8m; location / { "
                                 "proxy_pass http://127.0.0.1:%d; }" % (port, up_port))
            pids = lambda: nginx_pids(server)  # noqa: E731
            path, host = b"/put", b"127.0.0.1"
        else:
            server, port, _ = start_rebound(target, workdir, "")
            pids = lambda: [server.p.pid]  # noqa: E731
            path, host = b"http://127.0.0.1:%d/put" % up_port, b"127.0.0.1:%d" % up_port
        # PUT: idempotent, so rebound keeps each body for a retry (POST would need a key).
        async def one():
            try:
                r, w = await asyncio.open_connection("127.0.0.1", port)
                w.write(b"PUT " + path + b" HTTP/1.1\r\nHost: " + host + b"\r\nContent-Length: %d\r\n\r\n" % (1 << 20))
                w.write(b"x" * (1 << 20))
                await w.drain()
                await asyncio.wait_for(r.read(100), 20)
                w.close()
            except (ConnectionError, asyncio.TimeoutError, OSError):
                pass
        await asyncio.gather(*(one() for _ in range(400)))
        peak = peak_kib(pids())
        server.stop()
        up.close()
        return peak
    return asyncio.run(go())


attacks = {"h2-bodies": h2_bodies, "zero-window": zero_window, "admin-noauth": admin_noauth,
           "retry-buffer": retry_buffer}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rebound", action="append", help="a rebound binary (repeatable; default build/rebound)")
    ap.add_argument("--nginx", action="store_true", help="measure nginx doing the same jobs too")
    ap.add_argument("attack", nargs="*", choices=list(attacks) + [[]], default=list(attacks))
    a = ap.parse_args()
    targets = a.rebound or [os.path.join(root, "build", "rebound")]
    if a.nginx:
        targets.append("nginx")
    results = {}
    for name in a.attack or list(attacks):
        for t in targets:
            with tempfile.TemporaryDirectory() as workdir:
                peak = attacks[name](t, workdir)
            results.setdefault(name, {})[t] = peak
            print("%-13s %-40s peak RSS %8.1f MiB" % (name, t, peak / 1024.0), flush=True)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
