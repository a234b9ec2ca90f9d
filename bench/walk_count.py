#!/usr/bin/env python3
"""Counts the walk bench/walk.sh logged: stays, rooms, climbs back up, http/forward.cpp entries.
Usage: walk_count.py ENTRIES START END (the request's window, in seconds since the epoch)."""
import re
import sys

# scripts/check-includes' layer order: a move to a higher rank is a climb back up.
RANK = {"wire": 0, "retry": 0, "observe": 0, "store": 0, "idempotency": 0, "runtime": 0, "config": 0,
        "upstream": 1, "auth": 2, "h2": 2, "plan": 3, "http": 4, "grpc": 5, "inbound": 5, "delivery": 5,
        "admin": 5, "app": 6}


def room(path):
    """The source file below proxy/ or config/ of an entry, or None (a library's inline frame)."""
    m = re.search(r"((?:proxy|config)/.*)$", path)
    return m.group(1) if m else None


def folder(r):
    m = re.fullmatch(r"proxy/(.*)/[^/]+", r)
    return m.group(1) if m else "config"


def main():
    entries, start, end = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
    rooms = []
    for line in open(entries):
        t, path, _ = line.rstrip("\n").split("\t", 2)
        r = room(path)
        if start <= float(t) <= end and r:
            rooms.append(r)
    stays = [r for i, r in enumerate(rooms) if i == 0 or rooms[i - 1] != r]
    climbs = sum(1 for a, b in zip(stays, stays[1:]) if RANK.get(folder(b), 0) > RANK.get(folder(a), 0))
    forward = sum(1 for s in stays if s == "proxy/http/forward.cpp")
    print(f"{len(rooms)} function entries, {len(stays)} stays in {len(set(stays))} rooms, "
          f"{climbs} climbs back up, http/forward.cpp entered {forward} times")
    print(" > ".join(s.removeprefix("proxy/") for s in stays))


if __name__ == "__main__":
    main()
