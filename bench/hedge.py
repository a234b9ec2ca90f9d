#!/usr/bin/env python3
"""Hedged requests (issue 22 part 3): the tail latency they win and the load they add.

usage: hedge.py [REBOUND_BINARY] [REQUESTS] [CONCURRENCY]   (defaults: build/rebound, 2000, 10)

The upstream is slow only sometimes: each request it receives takes 500 ms with probability
5% and about 1 ms otherwise (a seeded draw per arrival, so a hedge of a slow request is
itself slow 5% of the time, as on a real server with a slow replica or a GC pause). CONCURRENCY
clients send REQUESTS GETs in all through one rebound (one worker), each on its own keep-alive
connection, one request at a time (closed loop). Setups, each a fresh rebound and a fresh
upstream count:

  no hedge            the dependency as it is by default
  hedge after 20ms    hedge: {after: 20ms, max: 1}
  hedge after p95     hedge: {after: p95, max: 1}  (the observed p95; half attempt_timeout until 20 samples)

Budget and breaker are SPEC's defaults (ratio 0.2 over 30 s, min_retries 10): hedges are
spent from that budget like retries. Prints a Markdown table: client latency p50/p95/p99/max,
upstream requests per client request (the extra load), and hedges by outcome from /metrics.
Standard library only.
"""
import asyncio
import os
import random
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

from http_bench import Upstream, free_port, read_response

SLOW_SHARE = 0.05
SLOW = 0.5
FAST = 0.001


class SometimesSlow:
    """Each request it receives is slow with probability SLOW_SHARE (a seeded draw)."""

    def __init__(self, seed):
        self.rng = random.Random(seed)

    async def __call__(self, head):
        slow = self.rng.random() < SLOW_SHARE
        await asyncio.sleep(SLOW if slow else FAST)
        body = b"slow" if slow else b"fast"
        return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)


async def client(proxy_port, authority, count, latencies, statuses):
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy_port)
    try:
        for i in range(count):
            start = time.monotonic()
            writer.write(f"GET http://{authority}/item/{i} HTTP/1.1\r\nHost: {authority}\r\n\r\n".encode())
            await writer.drain()
            statuses.append(await read_response(reader))
            latencies.append(time.monotonic() - start)
    finally:
        writer.close()


def hedges_by_outcome(admin_port):
    text = urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/metrics", timeout=5).read().decode()
    out = {}
    for m in re.finditer(r'^retry_hedges(_suppressed)?_total\{[^}]*(?:outcome|reason)="([a-z_]+)"[^}]*\} ([0-9.e+]+)$',
                         text, re.M):
        out[("suppressed " if m.group(1) else "") + m.group(2)] = int(float(m.group(3)))
    return out


async def run_setup(binary, name, hedge, requests, concurrency):
    upstream = Upstream(SometimesSlow(seed=22))
    up_port, proxy_port, admin_port = free_port(), free_port(), free_port()
    server = await asyncio.start_server(upstream.handle, "127.0.0.1", up_port)
    authority = f"127.0.0.1:{up_port}"
    tmp = tempfile.mkdtemp(prefix="rebound-hedge-")
    config = os.path.join(tmp, "rebound.yaml")
    with open(config, "w") as f:
        f.write(f"""listen: 127.0.0.1:{proxy_port}
admin: 127.0.0.1:{admin_port}
workers: 1
dependencies:
  dep:
    hosts: ["{authority}"]
    attempt_timeout: 2s
    hedge: {hedge}
""")
    proc = subprocess.Popen([binary, "--config", config, "--log-level", "error"], stdout=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", proxy_port), timeout=1).close()
                break
            except OSError:
                await asyncio.sleep(0.05)
        latencies, statuses = [], []
        per_client = requests // concurrency
        await asyncio.gather(*(client(proxy_port, authority, per_client, latencies, statuses)
                               for _ in range(concurrency)))
        hedges = hedges_by_outcome(admin_port)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        server.close()
    latencies.sort()

    def pct(p):
        return latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1000

    return {"name": name, "requests": len(latencies), "p50": pct(0.50), "p95": pct(0.95), "p99": pct(0.99),
            "max": latencies[-1] * 1000, "arrivals": upstream.arrivals, "ok": statuses.count(200),
            "hedges": hedges}


async def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else "build/rebound"
    requests = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
    concurrency = int(sys.argv[3]) if len(sys.argv) > 3 else 10
    setups = [("no hedge", "off"), ("hedge after 20ms", "{after: 20ms, max: 1}"),
              ("hedge after p95", "{after: p95, max: 1}")]
    rows = [await run_setup(binary, n, h, requests, concurrency) for n, h in setups]
    print(f"{rows[0]['requests']} GETs from {concurrency} keep-alive clients; the upstream answers "
          f"{SLOW_SHARE:.0%} of its requests after {SLOW * 1000:.0f} ms, the rest after ~{FAST * 1000:.0f} ms:\n")
    print("| setup | p50 ms | p95 ms | p99 ms | max ms | upstream requests / client request | hedges | answered 200 |")
    print("|---|---:|---:|---:|---:|---:|---|---:|")
    for r in rows:
        hedges = ", ".join(f"{k} {v}" for k, v in sorted(r["hedges"].items())) or "-"
        print(f"| {r['name']} | {r['p50']:.1f} | {r['p95']:.1f} | {r['p99']:.1f} | {r['max']:.1f} | "
              f"{r['arrivals'] / r['requests']:.3f} | {hedges} | {r['ok']} |")


if __name__ == "__main__":
    asyncio.run(main())
