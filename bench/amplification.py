#!/usr/bin/env python3
"""Retry amplification with and without R-7's budget (issue 5), the seed's figure reproduced.

usage: amplification.py [REBOUND_BINARY] [ORIGINALS] [RATE]   (defaults: build/rebound, 3000, 1000/s)

The seed: "at 1,000 req/s with 50% failures and 3 retries, a dependency sees 2,500 req/s; with
R-7's 20% budget it sees 1,200". Here half of the original requests go to a path the upstream
always answers 503 (a persistent failure, as in the seed's arithmetic) and half to a path it
answers 200. rebound runs with `max_retries: 3` and fast backoff, in three setups, each a
fresh process against a fresh upstream count:

  no budget    budget {ratio: 0.2, min_retries: 1000000}: the floor makes the budget unlimited
               (rebound refuses a disabled budget, so this is the nearest setup to none)
  budget       SPEC's defaults: ratio 0.2 over 30 s, min_retries 10
  budget+breaker  the same plus the circuit breaker in enforce mode (SPEC defaults, open_for 30 s)

Prints a Markdown table: originals sent, upstream arrivals, arrivals / originals, arrival rate
over the run. The load is open loop (each original leaves at its scheduled time on its own
connection), as in the seed's 1,000 req/s. Standard library only.
"""
import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time

from http_bench import Upstream, free_port, read_response


async def answer(head):
    """Half the originals go to /fail, a persistent failure; the rest succeed."""
    if head.split(b" ", 2)[1].startswith(b"/fail"):
        return b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\nbusy"
    return b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


async def one_request(proxy_port, authority, path, at, statuses):
    """Open loop: the request leaves at its scheduled time whatever happened to the others,
    as a client fleet's load would, so the upstream's arrival rate is comparable to the seed's."""
    await asyncio.sleep(max(0.0, at - time.monotonic()))
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy_port)
    try:
        writer.write(f"GET http://{authority}{path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        statuses.append(await read_response(reader))
    finally:
        writer.close()


async def run_setup(binary, name, policy, originals, rate):
    upstream = Upstream(answer)
    up_port, proxy_port, admin_port = free_port(), free_port(), free_port()
    server = await asyncio.start_server(upstream.handle, "127.0.0.1", up_port)
    authority = f"127.0.0.1:{up_port}"
    tmp = tempfile.mkdtemp(prefix="rebound-amp-")
    config = os.path.join(tmp, "rebound.yaml")
    with open(config, "w") as f:
        f.write(f"""listen: 127.0.0.1:{proxy_port}
admin: 127.0.0.1:{admin_port}
workers: 1
dependencies:
  dep:
    hosts: ["{authority}"]
    max_retries: 3
    backoff: {{base: 1ms, cap: 4ms}}
{policy}""")
    proc = subprocess.Popen([binary, "--config", config, "--log-level", "error"], stdout=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", proxy_port), timeout=1).close()
                break
            except OSError:
                await asyncio.sleep(0.05)
        statuses = []
        start = time.monotonic() + 0.1
        await asyncio.gather(*(one_request(proxy_port, authority, ("/fail" if i % 2 else "/ok") + f"/{i}",
                                           start + i / rate, statuses) for i in range(originals)))
        elapsed = time.monotonic() - start
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        server.close()
    return {"name": name, "originals": len(statuses), "arrivals": upstream.arrivals, "seconds": elapsed,
            "ok": statuses.count(200), "failed": len(statuses) - statuses.count(200)}


async def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else "build/rebound"
    originals = int(sys.argv[2]) if len(sys.argv) > 2 else 3000
    rate = float(sys.argv[3]) if len(sys.argv) > 3 else 1000.0
    setups = [
        ("no budget (min_retries 1000000)", "    budget: {min_retries: 1000000}\n    circuit_breaker: {mode: off}\n"),
        ("budget (SPEC defaults)", "    circuit_breaker: {mode: off}\n"),
        ("budget + breaker (enforce)", ""),
    ]
    rows = [await run_setup(binary, n, p, originals, rate) for n, p in setups]
    print(f"{originals} originals at {rate:,.0f}/s, half to an always-503 path, `max_retries: 3`:\n")
    print("| setup | originals | upstream arrivals | arrivals / originals | upstream arrival rate | answered 200 |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['name']} | {r['originals']} | {r['arrivals']} | {r['arrivals'] / r['originals']:.2f} | "
              f"{r['arrivals'] / r['seconds']:,.0f}/s | {r['ok']} |")
    print("\nThe seed's arithmetic: 2.50 without a budget (1 + 3 retries x 50%), 1.20 with R-7's 20%.")


if __name__ == "__main__":
    asyncio.run(main())
