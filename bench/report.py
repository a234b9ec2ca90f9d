#!/usr/bin/env python3
"""Turns the raw files bench/run.sh writes into the Markdown report (stdout).

usage: report.py DIR CLK_TCK IDLE_COUNT

DIR/runs.tsv   scenario target round requests duration_us p50_us p99_us connect read write status
               timeout proxy_ticks wrk_ticks nginx_ticks other_ticks bytes
DIR/peaks.tsv  scenario target vmhwm_kib
DIR/stops.tsv  scenario target exit_status_on_sigterm
DIR/idle.tsv   proxy mode rss_before_kib rss_after_kib fds_before fds_after opened still_open ok failed
"""
import statistics
import sys
from collections import defaultdict

SCENARIOS = {
    "get1k-w1": "GET 1 KiB, 64 conns, 1 thread",
    "get1k-w2": "GET 1 KiB, 64 conns, 2 threads",
    "c1000": "GET 1 KiB, 1,000 conns",
    "get16k": "GET 16 KiB",
    "get1m": "GET 1 MiB",
    "post64k": "POST 64 KiB",
    "tls": "GET 1 KiB, TLS to the upstream",
    "retry": "GET 1 KiB, retry policy on vs retry_on: []",
}
NAMES = {"direct": "direct", "rebound": "rebound", "haproxy": "haproxy",
         "rebound_noretry": "rebound, retry_on: []"}


def read_tsv(path):
    try:
        with open(path) as f:
            return [line.rstrip("\n").split("\t") for line in f if line.strip()]
    except FileNotFoundError:
        return []


def ms(us):
    return f"{us / 1000:.2f} ms"


def mib(kib):
    return f"{kib / 1024:.1f} MiB"


def ratio(a, b):
    if a is None or b is None or b == 0:
        return "n/a"
    return f"{a / b:.2f}x"


def main():
    out_dir, clk_tck, idle_count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    runs = defaultdict(lambda: defaultdict(list))
    order = []
    for row in read_tsv(f"{out_dir}/runs.tsv"):
        scenario, target, rnd = row[0], row[1], int(row[2])
        (requests, duration_us, p50, p99, c, r, w, s, t, ticks, wrk, nginx, other,
         nbytes) = map(int, row[3:])
        if scenario not in order:
            order.append(scenario)
        secs = duration_us / 1e6
        runs[scenario][target].append(dict(
            round=rnd, requests=requests, rps=requests / secs, p50=p50, p99=p99,
            errors=c + r + w + s + t, ticks=ticks, other=other, seconds=secs,
            mbps=nbytes / secs / 1e6, gb=nbytes / 1e9))
    peaks = {(r[0], r[1]): int(r[2]) for r in read_tsv(f"{out_dir}/peaks.tsv")}
    stops = {(r[0], r[1]): r[2] for r in read_tsv(f"{out_dir}/stops.tsv")}

    med = {}
    for sc in order:
        for target, rs in runs[sc].items():
            cpu = cpu_gb = None
            if target != "direct":
                cpu = statistics.median((x["ticks"] / clk_tck) / x["requests"] * 1e5 for x in rs)
                cpu_gb = statistics.median((x["ticks"] / clk_tck) / x["gb"] for x in rs if x["gb"] > 0)
            med[sc, target] = dict(
                rps=statistics.median(x["rps"] for x in rs), p50=statistics.median(x["p50"] for x in rs),
                p99=statistics.median(x["p99"] for x in rs), cpu=cpu, cpu_gb=cpu_gb,
                mbps=statistics.median(x["mbps"] for x in rs), hwm=peaks.get((sc, target)),
                errors=sum(x["errors"] for x in rs))

    print("| scenario | target | req/s | p50 | p99 | proxy CPU s / 100k req | MB/s received | proxy CPU s / GB received | proxy peak RSS | wrk errors |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for sc in order:
        for target in runs[sc]:
            m = med[sc, target]
            cpu = "n/a" if m["cpu"] is None else f"{m['cpu']:.2f}"
            cpu_gb = "n/a" if m["cpu_gb"] is None else f"{m['cpu_gb']:.2f}"
            hwm = "n/a" if m["hwm"] is None else mib(m["hwm"])
            print(f"| {SCENARIOS.get(sc, sc)} | {NAMES.get(target, target)} | {m['rps']:,.0f} | {ms(m['p50'])} | "
                  f"{ms(m['p99'])} | {cpu} | {m['mbps']:,.1f} | {cpu_gb} | {hwm} | {m['errors']} |")

    print()
    print("rebound relative to its peer in the same scenario (req/s: > 1 is better; the rest: < 1 is better):")
    print()
    print("| scenario | peer | req/s | p99 | CPU / 100k req | peak RSS |")
    print("|---|---|---:|---:|---:|---:|")
    for sc in order:
        peer = "rebound" if "rebound_noretry" in runs[sc] else "haproxy"
        mine = "rebound_noretry" if peer == "rebound" else "rebound"
        if (sc, mine) not in med or (sc, peer) not in med:
            continue
        a, b = med[sc, mine], med[sc, peer]
        label = "rebound with its retry policy (the row is retry_on: [] over it)" if peer == "rebound" else "haproxy"
        print(f"| {SCENARIOS.get(sc, sc)} | {label} | {ratio(a['rps'], b['rps'])} | {ratio(a['p99'], b['p99'])} | "
              f"{ratio(a['cpu'], b['cpu'])} | {ratio(a['hwm'], b['hwm'])} |")

    disturbed = [f"{sc} {t} round {x['round']} ({x['other'] / clk_tck:.1f} s)"
                 for sc in order for t, rs in runs[sc].items() for x in rs
                 if x["other"] / clk_tck > 0.3 * x["seconds"]]
    if disturbed:
        print()
        print("**Disturbed runs** (CPU outside wrk, nginx and the proxy > 0.3 s per second of run): "
              + ", ".join(disturbed) + ". Rerun on an idle machine before drawing conclusions.")
    bad_stops = [f"{sc} {t}: {rc}" for (sc, t), rc in stops.items() if t.startswith("rebound") and rc != "0"]
    print()
    if bad_stops:
        print("**rebound did not exit 0 on SIGTERM** (137 = killed after 15 s): " + ", ".join(bad_stops))
    elif stops:
        print("rebound exited 0 on SIGTERM after every scenario.")

    idle = read_tsv(f"{out_dir}/idle.tsv")
    if idle:
        print()
        print(f"| idle client connections ({idle_count}) | mode | RSS before | RSS with connections open | per connection | fds before → open | still open at end | setup (200 / failed) |")
        print("|---|---|---:|---:|---:|---|---:|---|")
        for proxy, mode, before, after, fds_b, fds_a, opened, still, ok, failed in idle:
            before, after = int(before), int(after)
            per = (after - before) / max(int(opened), 1)
            setup = "n/a (no request sent)" if mode == "fresh" else f"{ok} / {failed}"
            print(f"| {proxy} | {mode} | {mib(before)} | {mib(after)} | {per:.1f} KiB | "
                  f"{fds_b} → {fds_a} | {still} / {opened} | {setup} |")


if __name__ == "__main__":
    main()
