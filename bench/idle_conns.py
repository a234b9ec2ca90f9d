#!/usr/bin/env python3
"""Opens N client connections to a proxy and holds them open, for bench/run.sh.

usage: idle_conns.py HOST PORT COUNT MODE READY_FILE STOP_FILE MAX_SECONDS [TARGET_URL]

MODE fresh:     connect and send nothing (a connection that has not sent its first request).
MODE keepalive: send one proxy-form GET TARGET_URL on each connection, read the whole response
                (must be 200), then keep the connection idle (an idle keep-alive client).

When all connections are in the wanted state it writes "ok=N failed=M" to READY_FILE, then
waits until STOP_FILE exists (or MAX_SECONDS pass), checks how many connections the proxy
still holds open (a peek that sees EOF or a reset means the proxy closed it) and prints
"opened=N still_open=K" on stdout. Standard library only.
"""
import os
import resource
import select
import socket
import sys
import time


def read_response(sock):
    """Reads one HTTP/1.1 response framed by Content-Length; returns the status code."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed before the response head")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split()[1])
    length = None
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
        if name.strip().lower() == b"transfer-encoding":
            raise ValueError("chunked response: not expected from the benchmark upstream")
    if length is None:
        raise ValueError("response without Content-Length")
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed inside the response body")
        body += chunk
    return status


def main():
    host, port, count, mode, ready_file, stop_file, max_seconds = sys.argv[1:8]
    port, count, max_seconds = int(port), int(count), float(max_seconds)
    target = sys.argv[8] if len(sys.argv) > 8 else ""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < count + 64:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, count + 256), hard))

    socks, failed = [], 0
    for _ in range(count):
        s = socket.create_connection((host, port), timeout=10)
        socks.append(s)
    if mode == "keepalive":
        authority = target.split("://", 1)[1].split("/", 1)[0]
        request = (f"GET {target} HTTP/1.1\r\nHost: {authority}\r\n"
                   "User-Agent: rebound-bench-idle\r\n\r\n").encode()
        # In batches, so the proxy does not see 1,000 simultaneous requests to one upstream.
        batch = 50
        for i in range(0, count, batch):
            group = socks[i:i + batch]
            for s in group:
                s.sendall(request)
            for s in group:
                try:
                    if read_response(s) != 200:
                        failed += 1
                except (OSError, ValueError):
                    failed += 1
    elif mode != "fresh":
        sys.exit(f"unknown mode {mode}")

    with open(ready_file + ".tmp", "w") as f:
        f.write(f"ok={count - failed} failed={failed}\n")
    os.rename(ready_file + ".tmp", ready_file)

    deadline = time.monotonic() + max_seconds
    while not os.path.exists(stop_file) and time.monotonic() < deadline:
        time.sleep(0.1)

    still_open = 0
    for s in socks:
        s.setblocking(False)
        # poll, not select: select takes no descriptor past 1,023.
        poller = select.poll()
        poller.register(s, select.POLLIN)
        if not poller.poll(0):
            still_open += 1  # nothing to read and no EOF: the proxy still holds it
            continue
        try:
            if s.recv(1, socket.MSG_PEEK):
                still_open += 1  # unexpected bytes, but open
        except OSError:
            pass
    for s in socks:
        s.close()
    print(f"opened={count} still_open={still_open}")


if __name__ == "__main__":
    main()
