#!/usr/bin/env python3
"""bench/concurrency.py: the concurrency limit (issue 51) against an upstream pushed past its
capacity. The upstream serves CAPACITY requests at a time, SERVICE each; the rest wait in its
queue, and past QUEUE waiting it answers 503 at once. An open-loop client sends RATE requests
per second (a fixed arrival rate, whatever the answers do) through rebound for DURATION
seconds, once with `concurrency` off, once fixed at the capacity and once adaptive; it reports
goodput (200s per second), p50/p99 of the 200s, what rebound answered 503 and the upstream's
longest queue. Usage: bench/concurrency.py [rebound binary]; RATE (300), DURATION (8), CONFIGS (the
`concurrency:` values to compare, separated by `;`)."""
import asyncio, os, socket, statistics, subprocess, sys, tempfile, time

BIN = os.path.realpath(sys.argv[1] if len(sys.argv) > 1 else "build/rebound")
RATE, DURATION = int(os.environ.get("RATE", 300)), float(os.environ.get("DURATION", 8))
CAPACITY, SERVICE, QUEUE = 4, 0.020, 400  # 200 requests/s at most


def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p


class Upstream:
    def __init__(self):
        self.sem, self.waiting, self.longest = asyncio.Semaphore(CAPACITY), 0, 0

    async def handle(self, reader, writer):
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                if self.waiting >= QUEUE:
                    status = b"503 Service Unavailable"
                else:
                    self.waiting += 1; self.longest = max(self.longest, self.waiting)
                    async with self.sem:
                        self.waiting -= 1
                        await asyncio.sleep(SERVICE)
                    status = b"200 OK"
                writer.write(b"HTTP/1.1 " + status + b"\r\nContent-Length: 2\r\n\r\nok")
                await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.CancelledError, ConnectionError):
            pass
        finally:
            writer.close()


async def one(port, results):
    start = time.monotonic()
    try:
        r, w = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 10)
        w.write(b"GET http://svc.bench/ HTTP/1.1\r\nHost: svc.bench\r\nConnection: close\r\n\r\n")
        data = await asyncio.wait_for(r.read(), 30)
        w.close()
        status = int(data.split(b" ", 2)[1]) if data else 0
    except Exception:
        status = 0
    results.append((status, time.monotonic() - start))


async def run(concurrency, rate=RATE):
    up = Upstream()
    server = await asyncio.start_server(up.handle, "127.0.0.1", 0, backlog=4096)
    uport = server.sockets[0].getsockname()[1]
    rport, aport = free_port(), free_port()
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(f"listen: 127.0.0.1:{rport}\nadmin: 127.0.0.1:{aport}\nworkers: 1\nlog_level: error\n"
                f"dependencies:\n  svc:\n    hosts: [svc.bench]\n    origin: http://127.0.0.1:{uport}\n"
                f"    attempt_timeout: 2s\n    total_timeout: 10s\n    concurrency: {concurrency}\n")
    rb = subprocess.Popen([BIN, "--config", f.name], stdout=subprocess.DEVNULL)
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", rport), 0.2).close(); break
        except OSError:
            await asyncio.sleep(0.1)
    results, tasks, t0 = [], [], time.monotonic()
    n = int(rate * DURATION)
    for i in range(n):  # open loop: request i leaves at t0 + i / rate, answered or not
        delay = t0 + i / rate - time.monotonic()
        if delay > 0: await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(rport, results)))
    await asyncio.gather(*tasks)
    rb.terminate(); rb.wait(); server.close(); os.unlink(f.name)
    ok = sorted(d for s, d in results if s == 200)
    p = lambda q: ok[min(len(ok) - 1, int(q * len(ok)))] * 1000 if ok else float("nan")
    limited = sum(1 for s, _ in results if s == 503)
    name = concurrency if rate == RATE else f"{concurrency}, unloaded ({rate}/s)"
    return (f"| {name} | {len(ok) / DURATION:,.0f}/s | {p(0.5):.0f} ms | {p(0.99):.0f} ms | "
            f"{limited} | {sum(1 for s, _ in results if s not in (200, 503))} | {up.longest} |")


async def main():
    print(f"Open loop at {RATE}/s for {DURATION:.0f} s; the upstream serves {CAPACITY} at a time, "
          f"{SERVICE * 1000:.0f} ms each ({CAPACITY / SERVICE:.0f}/s), queue {QUEUE}\n")
    print("| concurrency | goodput | p50 of 200s | p99 of 200s | 503s | other failures | upstream's longest queue |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    configs = os.environ.get("CONFIGS") or ";".join(
        ("off", "{mode: fixed, limit: %d}" % CAPACITY, "{mode: adaptive, min_limit: 2, probe_interval: 5s}"))
    # The latency the dependency gives through rebound at a quarter of its capacity: what the
    # p99 under overload is compared with (the client's connect and Python's own time included).
    print(await run("off", int(CAPACITY / SERVICE / 4)), flush=True)
    for c in configs.split(";"):
        print(await run(c), flush=True)

asyncio.run(main())
