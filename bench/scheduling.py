#!/usr/bin/env python3
"""Scheduling overhead of async delivery (issue 46, defect 7; seed 001 asks under 5 ms an
attempt): how long a handed-over call waits between its 202 and its first attempt, and a retry
between the moment it is due and its attempt, on each store rebound runs on.

  bench/scheduling.py                      # sqlite, postgres direct, postgres through PgBouncer
  bench/scheduling.py --stores sqlite --calls 400

For each store one rebound (two workers) hands calls over to an upstream on this machine, one
at a time with a pause between them (an idle instance, as a sidecar mostly is). Each call's
first attempt is answered 503 with `Retry-After: 1` and its second 200, so:
  accept -> first attempt: the upstream's arrival time of attempt 1 minus the client's arrival
    time of the 202 (both CLOCK_MONOTONIC, one machine);
  due -> attempt: the arrival of attempt 2 minus (the arrival of attempt 1 + 1 s), the wait the
    retry was scheduled with (max(backoff, Retry-After), the backoff being 1-2 ms here).
Both include the upstream's own Python overhead (well under a millisecond) and, for the first,
the time the 202 took to reach the client. Prints a Markdown table (p50, p99, max) on stdout.
"""
import argparse
import http.client
import http.server
import os
import socketserver
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fleet_scale  # noqa: E402  (the throwaway PostgreSQL, PgBouncer and port helpers)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Upstream:
    """503 with Retry-After: 1 on a key's first attempt, 200 after; notes each arrival."""

    def __init__(self):
        self.arrivals = {}  # key -> [monotonic arrival of each attempt]
        self.lock = threading.Lock()
        upstream = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                now = time.monotonic()
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                key = self.headers.get("Idempotency-Key", "")
                with upstream.lock:
                    seen = upstream.arrivals.setdefault(key, [])
                    seen.append(now)
                    first = len(seen) == 1
                self.send_response(503 if first else 200)
                if first:
                    self.send_header("Retry-After", "1")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *a):
                pass

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def percentile(values, p):
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def run(store_yaml, label, binary, calls, gap, base):
    up = Upstream()
    port, admin = fleet_scale.free_port(), fleet_scale.free_port()
    config = os.path.join(base, f"{label}.yaml")
    with open(config, "w") as f:
        f.write(f"""listen: 127.0.0.1:{port}
admin: 127.0.0.1:{admin}
workers: 2
log_level: warn
{store_yaml}
dependencies:
  hooks:
    hosts: ["127.0.0.1:{up.port}"]
    context: webhook
    backoff: {{base: 1ms, cap: 2ms}}
    circuit_breaker: {{mode: signal}}
    budget: {{min_retries: 100000}}
""")
    proc = subprocess.Popen([binary, "--config", config], stdout=open(os.path.join(base, f"{label}.log"), "w"),
                            stderr=subprocess.STDOUT)
    try:
        for _ in range(200):
            try:
                c = http.client.HTTPConnection("127.0.0.1", admin, timeout=1)
                c.request("GET", "/readyz")
                if c.getresponse().status == 200:
                    break
            except OSError:
                pass
            time.sleep(0.05)
        accepted = {}  # key -> monotonic arrival of the 202
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        for i in range(calls):
            key = f"{label}-{i}"
            conn.request("POST", f"/hook/{i}", body=b"{}",
                         headers={"Host": f"127.0.0.1:{up.port}", "Content-Type": "application/json",
                                  "Prefer": "respond-async", "Idempotency-Key": key})
            r = conn.getresponse()
            r.read()
            accepted[key] = time.monotonic()
            if r.status != 202:
                sys.exit(f"{label}: call {i} answered {r.status}")
            time.sleep(gap)
        end = time.monotonic() + 30
        while time.monotonic() < end:
            with up.lock:
                if all(len(up.arrivals.get(k, [])) >= 2 for k in accepted):
                    break
            time.sleep(0.1)
        with up.lock:
            arrivals = dict(up.arrivals)
        first = [(arrivals[k][0] - t) * 1000 for k, t in accepted.items() if arrivals.get(k)]
        due = [(a[1] - a[0] - 1.0) * 1000 for a in arrivals.values() if len(a) >= 2]
        missing = sum(1 for k in accepted if len(arrivals.get(k, [])) < 2)
        return first, due, missing
    finally:
        proc.terminate()
        proc.wait(10)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--stores", default="sqlite,postgres,pgbouncer")
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--gap", type=float, default=0.02, help="seconds between hand-overs")
    ap.add_argument("--binary", default=os.environ.get("REBOUND_BIN", os.path.join(ROOT, "build", "rebound")))
    args = ap.parse_args()
    base = tempfile.mkdtemp(prefix="rebound-scheduling-")
    fleet_scale.give_to_server_user(base)
    rows = []
    pg = bouncer = None
    try:
        for store in args.stores.split(","):
            if store == "sqlite":
                yaml = f"store: {{path: {base}/rebound.db}}"
            else:
                if pg is None:
                    pg = fleet_scale.Postgres(base, max_connections=100, fsync=True)
                target = pg.port
                if store == "pgbouncer":
                    bouncer = bouncer or fleet_scale.PgBouncer(base, pg, server_pool=10, max_clients=100)
                    target = bouncer.port
                pg.query("DROP DATABASE IF EXISTS rebound WITH (FORCE)")
                pg.query("CREATE DATABASE rebound")
                yaml = f'store: {{type: postgres, dsn: "host=127.0.0.1 port={target} user=rebound dbname=rebound"}}'
            print(f"scheduling: {store} ...", file=sys.stderr, flush=True)
            first, due, missing = run(yaml, store, args.binary, args.calls, args.gap, base)
            rows.append((store, first, due, missing))
    finally:
        if bouncer:
            bouncer.stop()
        if pg:
            pg.stop()
    print(f"{args.calls} calls handed over one at a time, {int(args.gap * 1000)} ms apart; milliseconds\n")
    print("| store | accept -> first attempt p50 / p99 / max | due -> attempt p50 / p99 / max | calls not retried |")
    print("|---|---:|---:|---:|")
    for store, first, due, missing in rows:
        f = " / ".join(f"{percentile(first, p):.1f}" for p in (50, 99, 100)) if first else "-"
        d = " / ".join(f"{percentile(due, p):.1f}" for p in (50, 99, 100)) if due else "-"
        print(f"| {store} | {f} | {d} | {missing} |")
    return 1 if any(r[3] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
