#!/usr/bin/env python3
"""10,000 requests waiting in backoff at once: what they cost rebound (issue 4).

usage: backoff_memory.py [REBOUND_BINARY] [COUNT]      (defaults: build/rebound, 10000)

An upstream (a child process of this script, asyncio) answers every request 503. rebound runs
with `workers: 1`, `context: async` and decorrelated backoff from 60 s, so every request it
forwards fails once and then waits at least a minute for its retry. COUNT clients, in batches,
each send one GET through rebound and keep their connection open. Once rebound's log shows
COUNT `retry_attempt` events (every request is in its backoff wait), the script reads
rebound's VmRSS, VmHWM and thread count from /proc, compares the RSS with the same number of
idle keep-alive connections (the part of the cost that is the connection, not the wait),
then closes the clients and checks that rebound logs a `retry_cancelled` for each and that
the upstream never saw a retry. Prints a Markdown table on stdout. Standard library only.
"""
import asyncio
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time

BATCH = 500


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_status(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            out[key] = value.strip()
    return out


def kib(status, key):
    return int(status[key].split()[0])


def raise_nofile(need):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, need), hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


# ---- the upstream: 503 to everything, counting requests ----

def run_upstream(port, count_file):
    raise_nofile(4096)
    served = 0

    async def handle(reader, writer):
        nonlocal served
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                if not head:
                    break
                served += 1
                writer.write(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\nbusy")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def report():
        while True:
            with open(count_file + ".tmp", "w") as f:
                f.write(str(served))
            os.replace(count_file + ".tmp", count_file)
            await asyncio.sleep(0.2)

    async def main():
        server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=4096)
        asyncio.ensure_future(report())
        async with server:
            await server.serve_forever()

    asyncio.run(main())


# ---- the measurement ----

def wait_until(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.1)
    sys.exit(f"timed out waiting for {what}")


def count_events(log_path, event):
    needle = f'"event":"{event}"'.encode()
    with open(log_path, "rb") as f:
        return f.read().count(needle)


def served(count_file):
    with open(count_file) as f:
        return int(f.read() or 0)


def open_clients(port, count, request):
    socks = []
    for i in range(0, count, BATCH):
        group = []
        for _ in range(min(BATCH, count - i)):
            s = socket.create_connection(("127.0.0.1", port), timeout=30)
            group.append(s)
        for s in group:
            if request:
                s.sendall(request)
        socks.extend(group)
        yield socks


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else "build/rebound"
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 10000
    limit = raise_nofile(count + 512)
    if limit < count + 128:
        sys.exit(f"RLIMIT_NOFILE hard limit {limit} is too low for {count} connections")

    tmp = tempfile.mkdtemp(prefix="rebound-backoff-")
    up_port, proxy_port, admin_port = free_port(), free_port(), free_port()
    count_file = os.path.join(tmp, "served")
    upstream = subprocess.Popen([sys.executable, __file__, "--upstream", str(up_port), count_file])
    config = os.path.join(tmp, "rebound.yaml")
    with open(config, "w") as f:
        f.write(f"""listen: 127.0.0.1:{proxy_port}
admin: 127.0.0.1:{admin_port}
workers: 1
defaults:
  context: async
  max_retries: 3
  total_timeout: 10m
  attempt_timeout: 10s
  backoff: {{base: 60s, cap: 120s, jitter: decorrelated}}
""")
    log_path = os.path.join(tmp, "rebound.log")
    log = open(log_path, "wb")
    rebound = subprocess.Popen([binary, "--config", config], stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: os.path.exists(count_file), 10, "the upstream")
        wait_until(lambda: b'"event":"listening"' in open(log_path, "rb").read(), 10, "rebound to listen")
        base = proc_status(rebound.pid)
        authority = f"127.0.0.1:{up_port}"
        request = f"GET http://{authority}/busy HTTP/1.1\r\nHost: {authority}\r\n\r\n".encode()

        # 1. COUNT idle keep-alive connections (no request yet): the cost of a connection.
        t0 = time.monotonic()
        idle = None
        for idle in open_clients(proxy_port, count, None):
            pass
        time.sleep(1)
        with_idle = proc_status(rebound.pid)
        for s in idle:
            s.close()
        time.sleep(1)

        # 2. COUNT requests, each in its backoff wait.
        waiting = None
        for waiting in open_clients(proxy_port, count, request):
            n = len(waiting)
            wait_until(lambda: count_events(log_path, "retry_attempt") >= n, 60, f"{n} requests in backoff")
        wait_until(lambda: served(count_file) >= count, 10, "the upstream's count")
        setup_s = time.monotonic() - t0
        in_backoff = proc_status(rebound.pid)
        served_before = served(count_file)

        # 3. The clients leave: every wait must end, and nothing be retried.
        for s in waiting:
            s.close()
        wait_until(lambda: count_events(log_path, "retry_cancelled") >= count, 60, "every backoff to be cancelled")
        time.sleep(0.5)  # two refreshes of the upstream's count: a retry would show
        after = proc_status(rebound.pid)
        served_after = served(count_file)

        rebound.send_signal(signal.SIGTERM)
        code = rebound.wait(timeout=20)
    finally:
        if rebound.poll() is None:
            rebound.kill()
        upstream.kill()
        log.close()

    rss0 = kib(base, "VmRSS")
    rss_idle = kib(with_idle, "VmRSS")
    rss_wait = kib(in_backoff, "VmRSS")
    print(f"{count} requests in backoff at once, rebound `workers: 1` ({setup_s:.1f} s to set up):\n")
    print("| state | threads | VmRSS | over the start | per connection |")
    print("|---|---|---|---|---|")
    print(f"| started, no clients | {base['Threads']} | {rss0 / 1024:.1f} MiB | | |")
    print(f"| {count} idle client connections | {with_idle['Threads']} | {rss_idle / 1024:.1f} MiB | "
          f"{(rss_idle - rss0) / 1024:.1f} MiB | {(rss_idle - rss0) / count:.1f} KiB |")
    print(f"| **{count} requests waiting in backoff** | **{in_backoff['Threads']}** | **{rss_wait / 1024:.1f} MiB** | "
          f"**{(rss_wait - rss0) / 1024:.1f} MiB** | **{(rss_wait - rss0) / count:.1f} KiB** |")
    print(f"| all clients gone, waits cancelled | {after['Threads']} | {kib(after, 'VmRSS') / 1024:.1f} MiB | | |")
    print(f"\nPeak RSS (VmHWM) {kib(after, 'VmHWM') / 1024:.1f} MiB; the budget is 100 MB. Upstream requests: "
          f"{served_before} before the clients left, {served_after} after (a retry would add some); "
          f"retry_cancelled events: {count_events(log_path, 'retry_cancelled')}; rebound exit code on SIGTERM: {code}.")
    ok = served_after == served_before == count and code == 0 and kib(after, "VmHWM") < 100 * 1024
    if not ok:
        sys.exit("\nFAILED: see the table")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--upstream":
        run_upstream(int(sys.argv[2]), sys.argv[3])
    else:
        main()
