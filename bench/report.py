#!/usr/bin/env python3
"""Turns the raw files bench/run.sh writes into the Markdown report (stdout).

usage: report.py DIR CLK_TCK IDLE_COUNT

DIR/runs.tsv   target round requests duration_us p50_us p99_us connect read write status timeout
               proxy_ticks wrk_ticks nginx_ticks other_ticks
DIR/peaks.tsv  target vmhwm_kib
DIR/idle.tsv   proxy mode rss_before_kib rss_after_kib fds_before fds_after opened still_open ok failed
"""
import statistics
import sys
from collections import defaultdict

TARGETS = ["direct", "rebound", "haproxy"]


def read_tsv(path):
    try:
        with open(path) as f:
            return [line.rstrip("\n").split("\t") for line in f if line.strip()]
    except FileNotFoundError:
        return []


def ms(us):
    return f"{us / 1000:.2f} ms"


def kib_to_mib(kib):
    return f"{kib / 1024:.1f} MiB"


def ratio(a, b):
    if a is None or b is None or b == 0:
        return "n/a"
    return f"{a / b:.2f}x"


def main():
    out_dir, clk_tck, idle_count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    runs = defaultdict(list)
    for row in read_tsv(f"{out_dir}/runs.tsv"):
        target, rnd = row[0], int(row[1])
        requests, duration_us, p50, p99, c, r, w, s, t, ticks, wrk, nginx, other = map(int, row[2:])
        runs[target].append(dict(round=rnd, requests=requests, rps=requests / (duration_us / 1e6),
                                 p50=p50, p99=p99, errors=dict(connect=c, read=r, write=w,
                                                               status=s, timeout=t),
                                 ticks=ticks, wrk=wrk, nginx=nginx, other=other,
                                 seconds=duration_us / 1e6))
    peaks = {row[0]: int(row[1]) for row in read_tsv(f"{out_dir}/peaks.tsv")}

    med = {}
    for target in TARGETS:
        rs = runs.get(target)
        if not rs:
            continue
        cpu = None
        if target != "direct":
            # CPU seconds per 100k requests, per round, then the median of the rounds.
            cpu = statistics.median(
                (x["ticks"] / clk_tck) / x["requests"] * 1e5 if x["requests"] else float("inf")
                for x in rs)
        errs = defaultdict(int)
        for x in rs:
            for k, v in x["errors"].items():
                errs[k] += v
        med[target] = dict(rps=statistics.median(x["rps"] for x in rs),
                           p50=statistics.median(x["p50"] for x in rs),
                           p99=statistics.median(x["p99"] for x in rs),
                           cpu=cpu, hwm=peaks.get(target),
                           rounds=[x["rps"] for x in sorted(rs, key=lambda x: x["round"])],
                           errors=dict(errs))

    print("| target | req/s (median) | req/s per round | p50 | p99 | proxy CPU s / 100k req | proxy peak RSS (VmHWM) | wrk errors (all rounds) |")
    print("|---|---:|---|---:|---:|---:|---:|---|")
    for target in TARGETS:
        m = med.get(target)
        if not m:
            continue
        rounds = " / ".join(f"{v / 1000:.1f}k" for v in m["rounds"])
        cpu = "n/a (no proxy)" if m["cpu"] is None else f"{m['cpu']:.2f}"
        hwm = "n/a (no proxy)" if m["hwm"] is None else kib_to_mib(m["hwm"])
        bad = {k: v for k, v in m["errors"].items() if v}
        errors = "none" if not bad else ", ".join(f"{k} {v}" for k, v in bad.items())
        name = {"direct": "direct (wrk → nginx)", "rebound": "rebound", "haproxy": "haproxy"}[target]
        print(f"| {name} | {m['rps']:,.0f} | {rounds} | {ms(m['p50'])} | {ms(m['p99'])} | {cpu} | {hwm} | {errors} |")

    print()
    print("| CPU per run (median of rounds, seconds) | proxy | wrk | nginx | other (not these three) |")
    print("|---|---:|---:|---:|---:|")
    for target in TARGETS:
        rs = runs.get(target)
        if not rs:
            continue
        m = lambda k: statistics.median(x[k] for x in rs) / clk_tck
        proxy = "n/a" if target == "direct" else f"{m('ticks'):.1f}"
        print(f"| {target} | {proxy} | {m('wrk'):.1f} | {m('nginx'):.1f} | {m('other'):.1f} (max {max(x['other'] for x in rs) / clk_tck:.1f}) |")
    print()
    print("*other* = the machine's busy time minus wrk, nginx and the proxy: kernel work charged to no "
          "process (loopback softirq) plus any other process; a large or uneven value means a disturbed run.")
    disturbed = [f"{t} round {x['round']} ({x['other'] / clk_tck:.1f} s)"
                 for t in TARGETS for x in runs.get(t, []) if x["other"] / clk_tck > 0.3 * x["seconds"]]
    if disturbed:
        print()
        print("**Disturbed runs** (other > 0.3 CPU-seconds per second of run): " + ", ".join(disturbed)
              + ". Rerun on an idle machine before drawing conclusions.")

    if "rebound" in med:
        rb = med["rebound"]
        print()
        print("| rebound relative to | req/s | p50 | p99 | CPU / 100k req | peak RSS |")
        print("|---|---:|---:|---:|---:|---:|")
        if "haproxy" in med:
            hp = med["haproxy"]
            print(f"| haproxy | {ratio(rb['rps'], hp['rps'])} | {ratio(rb['p50'], hp['p50'])} | "
                  f"{ratio(rb['p99'], hp['p99'])} | {ratio(rb['cpu'], hp['cpu'])} | {ratio(rb['hwm'], hp['hwm'])} |")
        if "direct" in med:
            d = med["direct"]
            print(f"| direct | {ratio(rb['rps'], d['rps'])} | {ratio(rb['p50'], d['p50'])} "
                  f"(+{(rb['p50'] - d['p50']) / 1000:.2f} ms) | {ratio(rb['p99'], d['p99'])} "
                  f"(+{(rb['p99'] - d['p99']) / 1000:.2f} ms) | n/a | n/a |")
        if "haproxy" in med and "direct" in med:
            hp, d = med["haproxy"], med["direct"]
            print(f"| (haproxy relative to direct) | {ratio(hp['rps'], d['rps'])} | {ratio(hp['p50'], d['p50'])} "
                  f"(+{(hp['p50'] - d['p50']) / 1000:.2f} ms) | {ratio(hp['p99'], d['p99'])} "
                  f"(+{(hp['p99'] - d['p99']) / 1000:.2f} ms) | n/a | n/a |")

    idle = read_tsv(f"{out_dir}/idle.tsv")
    if idle:
        print()
        print(f"| idle client connections ({idle_count}) | mode | RSS before | RSS with connections open | per connection | fds before → open | still open at end | setup (200 / failed) |")
        print("|---|---|---:|---:|---:|---|---:|---|")
        for proxy, mode, before, after, fds_b, fds_a, opened, still, ok, failed in idle:
            before, after = int(before), int(after)
            per = (after - before) / max(int(opened), 1)
            setup = "n/a (no request sent)" if mode == "fresh" else f"{ok} / {failed}"
            print(f"| {proxy} | {mode} | {kib_to_mib(before)} | {kib_to_mib(after)} | {per:.1f} KiB | "
                  f"{fds_b} → {fds_a} | {still} / {opened} | {setup} |")


if __name__ == "__main__":
    main()
