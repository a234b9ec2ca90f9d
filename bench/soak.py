#!/usr/bin/env python3
"""The scripted upstream, the mixed load and the report of bench/soak.sh. Standard library only.

usage:
  soak.py upstream PORT_FILE [--fail-ratio F] [--reset-ratio F] [--close-ratio F] [--idle S] [--seed N]
  soak.py load --proxy PORT --upstream PORT --duration S --rate R --out FILE --progress FILE [--seed N]
  soak.py report DIR        (prints the Markdown report; exit 0 = flat and alive, 1 = not)

upstream: a threaded HTTP/1.1 server on 127.0.0.1 (port 0; the port it got is written to
  PORT_FILE). GET /get?size=N&off=O answers N bytes of a fixed pseudo-random pattern from offset
  O, framed by Content-Length (70%), chunked (20%) or close-delimited (10%). POST/PUT /upload/..
  reads the body (Content-Length or chunked, with trailers; Expect: 100-continue honoured) and
  answers "BYTES CRC32". /slow?ms=M waits M ms first. Every request, after its body was read,
  may instead get 503 (--fail-ratio, half of them with Retry-After: 0) or a TCP reset without
  an answer (--reset-ratio); a response may close its keep-alive connection
  (--close-ratio). An Expect: 100-continue request that draws 503 gets it at once, body unread,
  and the connection closes. /backoff/.. always answers 503. A request with `X-Soak-Fault: cut`
  gets its head and half its body, then a reset (mid-response). `X-Soak-Fault: clean` turns all
  faults off and closes the connection after the answer (for the sanity check). Idle keep-alive
  connections are closed after --idle seconds, as real servers do. GET /__stats (direct, not via
  the proxy) answers its counters as JSON.

load: worker threads of five kinds send absolute-form requests (`GET http://127.0.0.1:UP/...
  HTTP/1.1`, what an HTTP_PROXY client sends) to the proxy for --duration seconds at about
  --rate requests/s in total (0 = as fast as they can), and write every outcome to --out as JSON:
  keepalive  GETs on a kept connection (1% ask the upstream for a mid-response reset: kind get_cut)
  fresh      one GET per connection (connection churn; 10% HTTP/1.0)
  post       POST uploads with Content-Length, 1 KiB..2 MiB, 80% with their own Idempotency-Key,
             10% with Expect: 100-continue; kept connection
  chunked    PUT uploads with Transfer-Encoding: chunked, 1 KiB..2 MiB, 20% with a trailer
  abort      clients that leave: half a request head, half a body, before the answer of a slow
             request, during a retry's backoff wait, half-way through reading a 1-2 MiB answer
  Answers are checked: a GET's body must be exactly the pattern slice asked for, an upload's
  answer must name the byte count and CRC32 sent.
"""
import argparse
import collections
import json
import math
import os
import random
import signal
import socket
import socketserver
import statistics
import struct
import sys
import threading
import time
import traceback
import uuid
import zlib
from urllib.parse import parse_qs, urlsplit

PAT_SIZE = 4 << 20
KIB, MIB = 1024, 1024 * 1024


def make_pattern():
    return random.Random(0x50A4).randbytes(PAT_SIZE)


def set_reset_on_close(sock):
    """close() then sends a TCP RST instead of a FIN."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


# =============================================================================================
# upstream

class BodyCut(Exception):
    pass


class UpstreamServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024

    def __init__(self, args):
        super().__init__(("127.0.0.1", 0), UpstreamHandler)
        self.args = args
        self.pattern = make_pattern()
        self.lock = threading.Lock()
        self.counts = collections.Counter()
        self.examples = []
        self.conn_seq = 0

    def add(self, key, n=1):
        with self.lock:
            self.counts[key] += n

    def example(self, text):
        with self.lock:
            if len(self.examples) < 20:
                self.examples.append(text)


class UpstreamHandler(socketserver.BaseRequestHandler):
    def handle(self):
        srv, sock = self.server, self.request
        with srv.lock:
            srv.conn_seq += 1
            seed = srv.args.seed * 1000003 + srv.conn_seq
        self.rng = random.Random(seed)
        srv.add("connections")
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        rf = sock.makefile("rb", buffering=65536)
        try:
            while True:
                sock.settimeout(srv.args.idle)
                try:
                    line = rf.readline(65537)
                except socket.timeout:
                    srv.add("closed_idle_keepalive")
                    return
                if not line:
                    srv.add("closed_by_peer")
                    return
                if line in (b"\r\n", b"\n"):
                    continue
                sock.settimeout(30)
                if self.one_request(sock, rf, line) == "close":
                    return
        except BodyCut:
            srv.add("request_body_cut_short")
        except (ConnectionError, socket.timeout, TimeoutError) as e:
            srv.add("conn_error_" + type(e).__name__)
        except Exception:
            srv.add("upstream_exception")
            srv.example(traceback.format_exc())
        finally:
            try:
                rf.close()
                sock.close()
            except OSError:
                pass

    def one_request(self, sock, rf, line):
        srv, args, rng = self.server, self.server.args, self.rng
        parts = line.decode("latin-1").rstrip("\r\n").split(" ")
        if len(parts) != 3:
            srv.add("bad_request_line")
            srv.example(repr(line))
            return "close"
        method, target, _version = parts
        headers = {}
        while True:
            h = rf.readline(65537)
            if not h:
                raise BodyCut()
            if h in (b"\r\n", b"\n"):
                break
            name, _, value = h.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        url = urlsplit(target)
        path, query = url.path, parse_qs(url.query)

        def q(name, default):
            try:
                return int(query.get(name, [default])[0])
            except ValueError:
                return default

        if path == "/__stats":
            with srv.lock:
                body = json.dumps({"counts": dict(srv.counts), "examples": srv.examples}).encode()
            self.send(sock, 200, "OK", body, "cl", close=True)
            return "close"

        srv.add("requests")
        srv.add("method_" + method)
        fault = headers.get("x-soak-fault", "")
        te = headers.get("transfer-encoding", "").lower()
        cl = int(headers.get("content-length", "0") or 0)
        has_body = "chunked" in te or cl > 0
        expect = headers.get("expect", "").lower() == "100-continue" and has_body
        if expect:
            srv.add("expect_100_continue")

        r = rng.random()
        if fault == "cut":
            decision = "cut"
        elif fault == "clean":
            decision = "ok"
        elif path.startswith("/backoff"):
            decision = "503"
        elif r < args.fail_ratio:
            decision = "503"
        elif r < args.fail_ratio + args.reset_ratio:
            decision = "reset"
        else:
            decision = "ok"

        if decision == "503" and expect:
            # A final status before the body: the body stays unread, so the connection must close.
            srv.add("answered_503_before_body")
            self.send(sock, 503, "Service Unavailable", b"busy, body not read\n", "cl", close=True)
            return "close"
        if expect:
            sock.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        count, crc = self.read_body(rf, te, cl)
        srv.add("request_body_bytes", count)
        if path.startswith("/slow"):
            time.sleep(min(q("ms", 100), 5000) / 1000)

        close = fault == "clean" or rng.random() < args.close_ratio
        if decision == "503":
            extra = []
            if rng.random() < 0.5:
                extra.append("Retry-After: 0")
                srv.add("answered_503_retry_after_0")
            else:
                srv.add("answered_503")
            self.send(sock, 503, "Service Unavailable", b"busy\n", "cl", extra=extra, close=close)
            if close:
                srv.add("closed_after_response")
            return "close" if close else "keep"
        if decision == "reset":
            srv.add("reset_before_head")
            set_reset_on_close(sock)
            return "close"

        if path.startswith("/upload"):
            body = f"{count} {crc:08x}\n".encode()
        elif path.startswith("/get") or path.startswith("/slow"):
            size = max(0, min(q("size", 0), PAT_SIZE))
            off = max(0, min(q("off", 0), PAT_SIZE - size))
            body = memoryview(srv.pattern)[off:off + size]
        else:
            srv.add("answered_404")
            self.send(sock, 404, "Not Found", b"no such path\n", "cl", close=close)
            return "close" if close else "keep"

        if decision == "cut":
            srv.add("cut_mid_response")
            half = len(body) // 2
            sock.sendall(f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\nContent-Type: application/octet-stream\r\n\r\n".encode())
            sock.sendall(body[:half])
            time.sleep(0.05)  # let the head and the first half reach the proxy before the reset
            set_reset_on_close(sock)
            return "close"

        f = rng.random()
        framing = "cl" if f < 0.7 else "chunked" if f < 0.9 else "close"
        srv.add("answered_200_" + framing)
        self.send(sock, 200, "OK", body, framing, close=close)
        if close or framing == "close":
            srv.add("closed_after_response")
            return "close"
        return "keep"

    def read_body(self, rf, te, cl):
        count, crc = 0, 0
        if "chunked" in te:
            while True:
                line = rf.readline(4096)
                if not line.endswith(b"\n"):
                    raise BodyCut()
                size = int(line.split(b";", 1)[0].strip(), 16)
                if size == 0:
                    while True:  # trailer section
                        t = rf.readline(65537)
                        if not t:
                            raise BodyCut()
                        if t in (b"\r\n", b"\n"):
                            return count, crc
                        self.server.add("request_trailer_fields")
                while size > 0:
                    data = rf.read(min(size, 65536))
                    if not data:
                        raise BodyCut()
                    count += len(data)
                    crc = zlib.crc32(data, crc)
                    size -= len(data)
                if rf.readline(3) not in (b"\r\n", b"\n"):
                    raise BodyCut()
        left = cl
        while left > 0:
            data = rf.read(min(left, 65536))
            if not data:
                raise BodyCut()
            count += len(data)
            crc = zlib.crc32(data, crc)
            left -= len(data)
        return count, crc

    def send(self, sock, status, reason, body, framing, extra=(), close=False):
        head = [f"HTTP/1.1 {status} {reason}", "Content-Type: application/octet-stream"]
        head += list(extra)
        if framing == "cl":
            head.append(f"Content-Length: {len(body)}")
        elif framing == "chunked":
            head.append("Transfer-Encoding: chunked")
        if close or framing == "close":
            head.append("Connection: close")
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
        if framing == "chunked":
            pos, n = 0, len(body)
            while pos < n:
                step = min(n - pos, self.rng.randint(1, 128 * KIB))
                sock.sendall(b"%x\r\n" % step)
                sock.sendall(body[pos:pos + step])
                sock.sendall(b"\r\n")
                pos += step
            sock.sendall(b"0\r\n\r\n")
        else:
            sock.sendall(body)


def run_upstream(args):
    srv = UpstreamServer(args)
    port = srv.server_address[1]
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(f"{port}\n")
    os.rename(tmp, args.port_file)
    srv.serve_forever(poll_interval=0.5)


# =============================================================================================
# load

class Failure(Exception):
    def __init__(self, category, detail):
        super().__init__(f"{category}: {detail}")
        self.category, self.detail = category, detail


class Conn:
    """One client connection to the proxy with a read buffer; counts the bytes of the answer
    being read so a failure can say whether anything came at all."""

    def __init__(self, port, timeout):
        try:
            self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        except OSError as e:
            raise Failure("connect_failed", repr(e))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()
        self.got = 0
        self.used = 0

    def close(self, reset=False):
        try:
            if reset:
                set_reset_on_close(self.sock)
            self.sock.close()
        except OSError:
            pass

    def send(self, data):
        self.sock.sendall(data)

    def _fill(self, stage):
        try:
            data = self.sock.recv(262144)
        except socket.timeout:
            raise Failure("timeout" if self.got else "timeout_no_answer", f"{stage}: no data for {self.sock.gettimeout()} s")
        except ConnectionResetError as e:
            raise Failure("truncated" if self.got else "no_answer", f"{stage}: {e!r} after {self.got} bytes")
        except OSError as e:
            raise Failure("truncated" if self.got else "no_answer", f"{stage}: {e!r} after {self.got} bytes")
        if not data:
            raise Failure("truncated" if self.got else "no_answer", f"{stage}: EOF after {self.got} bytes")
        self.buf += data
        self.got += len(data)

    def read_until(self, sep, limit, stage):
        start = 0
        while True:
            i = self.buf.find(sep, start)
            if i >= 0:
                out = bytes(self.buf[:i + len(sep)])
                del self.buf[:i + len(sep)]
                return out
            if len(self.buf) > limit:
                raise Failure("bad_response", f"{stage}: no {sep!r} in {limit} bytes")
            start = max(0, len(self.buf) - len(sep) + 1)
            self._fill(stage)

    def read_exact(self, n, stage):
        while len(self.buf) < n:
            self._fill(stage)
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def read_to_eof(self, stage):
        while True:
            try:
                self._fill(stage)
            except Failure as f:
                if "EOF" in f.detail:
                    out = bytes(self.buf)
                    self.buf.clear()
                    return out
                raise

    def read_head(self):
        """(status, version, headers dict with lower-case names)."""
        raw = self.read_until(b"\r\n\r\n", 128 * KIB, "response head")
        lines = raw.decode("latin-1").split("\r\n")
        try:
            version, code = lines[0].split(" ", 2)[:2]
            status = int(code)
        except ValueError:
            raise Failure("bad_response", f"status line {lines[0]!r}")
        headers = {}
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        return status, version, headers

    def read_body(self, method, status, version, headers):
        """(body, connection_closes)."""
        closes = "close" in headers.get("connection", "").lower() or (
            version == "HTTP/1.0" and "keep-alive" not in headers.get("connection", "").lower())
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            return b"", closes
        if "chunked" in headers.get("transfer-encoding", "").lower():
            parts = []
            while True:
                line = self.read_until(b"\r\n", 4096, "chunk size")
                try:
                    size = int(line.split(b";", 1)[0].strip(), 16)
                except ValueError:
                    raise Failure("bad_response", f"chunk size line {line[:40]!r}")
                if size == 0:
                    while self.read_until(b"\r\n", 64 * KIB, "trailers") != b"\r\n":
                        pass
                    return b"".join(parts), closes
                parts.append(self.read_exact(size, "chunk data"))
                if self.read_exact(2, "chunk end") != b"\r\n":
                    raise Failure("bad_response", "chunk not followed by CRLF")
        if "content-length" in headers:
            return self.read_exact(int(headers["content-length"]), "body"), closes
        return self.read_to_eof("close-delimited body"), True

    def read_response(self, method):
        while True:
            status, version, headers = self.read_head()
            if 100 <= status < 200:
                continue
            body, closes = self.read_body(method, status, version, headers)
            return status, headers, body, closes


def log_uniform(rng, lo, hi):
    return int(math.exp(rng.uniform(math.log(lo), math.log(hi))))


class Load:
    KINDS = {  # kind: (share of the rate, threads per process)
        "keepalive": (0.45, 3),
        "fresh": (0.25, 2),
        "post": (0.12, 2),
        "chunked": (0.08, 1),
        "abort": (0.10, 1),
    }

    def __init__(self, args):
        self.args = args
        self.authority = f"127.0.0.1:{args.upstream}"
        self.pattern = make_pattern()
        self.pview = memoryview(self.pattern)
        self.lock = threading.Lock()
        self.counts = collections.defaultdict(collections.Counter)  # kind -> outcome -> n
        self.latency = collections.defaultdict(collections.Counter)  # kind -> ms bucket -> n
        self.sent = collections.Counter()
        self.bytes = collections.Counter()
        self.examples = []
        self.notes = collections.Counter()
        self.slowest = {}  # kind -> (ms, outcome, request, t)
        self.done = 0
        self.start = time.monotonic()
        self.deadline = self.start + args.duration
        self.timeout = 30.0

    # --- bookkeeping -------------------------------------------------------------------------
    def record(self, kind, outcome, t0=None, example=None, request=None):
        with self.lock:
            self.counts[kind][outcome] += 1
            self.done += 1
            if t0 is not None:
                ms = (time.monotonic() - t0) * 1000
                if outcome == "200":
                    self.latency[kind][float(f"{ms:.2g}")] += 1  # two significant digits
                if ms > self.slowest.get(kind, (0,))[0]:
                    self.slowest[kind] = (ms, outcome, request or "", round(time.monotonic() - self.start, 1))
            if example is not None and len(self.examples) < 40:
                example["t"] = round(time.monotonic() - self.start, 1)
                example["kind"], example["outcome"] = kind, outcome
                self.examples.append(example)

    def add_bytes(self, direction, n):
        with self.lock:
            self.bytes[direction] += n

    @staticmethod
    def outcome(status, headers):
        """"200", "503" (the upstream's answer), "502 connect_reset" (rebound's own, by Rebound-Error)."""
        err = headers.get("rebound-error")
        return f"{status} {err}" if err else str(status)

    def head(self, method, path, extra=(), version="HTTP/1.1"):
        lines = [f"{method} http://{self.authority}{path} {version}", f"Host: {self.authority}",
                 "User-Agent: rebound-soak"]
        lines += list(extra)
        return ("\r\n".join(lines) + "\r\n\r\n").encode()

    def exchange(self, kind, st, method, path, extra=(), body=None, chunks=None, check=None,
                 reuse=True, version="HTTP/1.1", cut_ok=False):
        """Sends one well-formed request and records its outcome. body: bytes-like sent after
        the head (Content-Length must be in extra); chunks: list of byte strings already framed."""
        with self.lock:
            self.sent[kind] += 1
        conn = st.get("conn") if reuse else None
        reused = conn is not None
        req = f"{method} {path}" + (" (reused connection)" if reused else "")
        t0 = time.monotonic()
        try:
            if conn is None:
                conn = Conn(self.args.proxy, self.timeout)
            conn.got = 0
            conn.used += 1
            send_error = None
            try:
                conn.send(self.head(method, path, extra, version))
                if body is not None:
                    conn.send(body)
                    self.add_bytes("up", len(body))
                for c in chunks or ():
                    conn.send(c)
                    self.add_bytes("up", len(c))
            except OSError as e:
                send_error = e  # the proxy may have answered early; read what it said
            try:
                status, headers, rbody, closes = conn.read_response(method)
            except Failure as f:
                if send_error is not None and f.category in ("no_answer", "truncated"):
                    raise Failure("send_failed", f"{send_error!r}; then {f.detail}")
                raise
            self.add_bytes("down", len(rbody))
            outcome = self.outcome(status, headers)
            if status == 200 and check is not None:
                problem = check(rbody)
                if problem:
                    self.record(kind, "bad_body", example={"request": req, "detail": problem})
                    conn.close()
                    st["conn"] = None
                    return
            self.record(kind, outcome, t0, request=req)
            if closes or not reuse or send_error is not None:
                conn.close()
                st["conn"] = None
            else:
                st["conn"] = conn
        except Failure as f:
            if conn is not None:
                conn.close()
            st["conn"] = None
            if cut_ok and f.category in ("truncated", "no_answer"):
                self.record(kind, "truncated_as_asked", t0, request=req)
                return
            category = f.category + ("_on_reused_conn" if reused and f.category == "no_answer" else "")
            self.record(kind, category, t0, example={"request": req, "detail": f.detail}, request=req)

    def pick_get(self, rng):
        r = rng.random()
        if r < 0.1:
            size = 0
        elif r < 0.97:
            size = log_uniform(rng, 16, 256 * KIB)
        else:
            size = log_uniform(rng, 256 * KIB, 2 * MIB)
        off = rng.randrange(PAT_SIZE - size + 1)
        return size, off

    def check_get(self, size, off):
        want = self.pview[off:off + size]

        def check(body):
            if len(body) != size:
                return f"body has {len(body)} bytes, asked for {size}"
            if body != want:
                i = next(i for i in range(size) if body[i] != want[i])
                return f"body differs from the pattern at byte {i} of {size} (offset {off})"
            return None
        return check

    def check_upload(self, n, crc):
        want = f"{n} {crc:08x}\n".encode()

        def check(body):
            return None if body == want else f"upstream saw {body[:60]!r}, sent {want!r}"
        return check

    # --- kinds --------------------------------------------------------------------------------
    def do_keepalive(self, rng, st):
        size, off = self.pick_get(rng)
        r = rng.random()
        if r < 0.01 and size >= 4 * KIB:
            # a separate connection, so the cut does not end the kept one's run of requests
            self.exchange("get_cut", {}, "GET", f"/get?size={size}&off={off}", ["X-Soak-Fault: cut"],
                          reuse=False, cut_ok=True)
            return
        if r < 0.06:
            path = f"/slow?ms={rng.randint(10, 300)}&size={size}&off={off}"
        else:
            path = f"/get?size={size}&off={off}"
        self.exchange("keepalive", st, "GET", path, check=self.check_get(size, off))

    def do_fresh(self, rng, st):
        size, off = self.pick_get(rng)
        r = rng.random()
        if r < 0.1:
            self.exchange("fresh", {}, "GET", f"/get?size={size}&off={off}", version="HTTP/1.0",
                          check=self.check_get(size, off), reuse=False)
        else:
            extra = ["Connection: close"] if r < 0.55 else []
            self.exchange("fresh", {}, "GET", f"/get?size={size}&off={off}", extra,
                          check=self.check_get(size, off), reuse=False)

    def upload_slice(self, rng):
        n = log_uniform(rng, KIB, 2 * MIB)
        off = rng.randrange(PAT_SIZE - n + 1)
        data = self.pview[off:off + n]
        return n, data, zlib.crc32(data)

    def do_post(self, rng, st):
        n, data, crc = self.upload_slice(rng)
        extra = ["Content-Type: application/octet-stream", f"Content-Length: {n}"]
        if rng.random() < 0.8:
            extra.append(f"Idempotency-Key: {uuid.UUID(int=rng.getrandbits(128), version=4)}")
        path = f"/upload/post-{n}"
        if rng.random() < 0.1:
            self.post_expect(rng, st, path, extra, data, n, crc)
            return
        self.exchange("post", st, "POST", path, extra, body=data, check=self.check_upload(n, crc))

    def post_expect(self, rng, st, path, extra, data, n, crc):
        """POST with Expect: 100-continue: the head, then the body only after 100 Continue (or
        3 s without an answer); a final status first means the body is never sent."""
        kind = "post_expect"
        with self.lock:
            self.sent[kind] += 1
        conn = st.get("conn")
        st["conn"] = None
        try:
            if conn is None:
                conn = Conn(self.args.proxy, self.timeout)
            conn.got = 0
            t0 = time.monotonic()
            conn.send(self.head("POST", path, extra + ["Expect: 100-continue"]))
            conn.sock.settimeout(3)
            try:
                status, version, headers = conn.read_head()
            except Failure as f:
                if not f.category.startswith("timeout"):
                    raise
                status = None
            conn.sock.settimeout(self.timeout)
            if status is None or status == 100:
                if status is None:
                    with self.lock:
                        self.notes["Expect: 100-continue without any answer within 3 s"] += 1
                conn.send(data)
                self.add_bytes("up", n)
                status, headers, body, closes = conn.read_response("POST")
            else:
                body, closes = conn.read_body("POST", status, version, headers)
                closes = True  # the body was not sent: the connection cannot carry another request
            if status == 200:
                problem = self.check_upload(n, crc)(body)
                if problem:
                    self.record(kind, "bad_body", example={"request": f"POST {path} (Expect)", "detail": problem})
                    conn.close()
                    return
            self.record(kind, self.outcome(status, headers), t0, request=f"POST {path} (Expect)")
            if closes:
                conn.close()
            else:
                st["conn"] = conn
        except OSError as e:
            if conn is not None:
                conn.close()
            self.record(kind, "send_failed", example={"request": f"POST {path} (Expect)", "detail": repr(e)})
        except Failure as f:
            if conn is not None:
                conn.close()
            self.record(kind, f.category, example={"request": f"POST {path} (Expect)", "detail": f.detail})

    def do_chunked(self, rng, st):
        n, data, crc = self.upload_slice(rng)
        chunks, pos = [], 0
        while pos < n:
            step = min(n - pos, rng.randint(1, 64 * KIB))
            chunks.append(b"%x\r\n" % step + data[pos:pos + step].tobytes() + b"\r\n")
            pos += step
        trailer = rng.random() < 0.2
        chunks.append(b"0\r\n" + (f"X-Soak-Crc: {crc:08x}\r\n".encode() if trailer else b"") + b"\r\n")
        extra = ["Content-Type: application/octet-stream", "Transfer-Encoding: chunked"]
        if trailer:
            extra.append("Trailer: X-Soak-Crc")
        self.exchange("chunked", st, "PUT", f"/upload/put-{n}", extra, chunks=chunks,
                      check=self.check_upload(n, crc))

    def do_abort(self, rng, st):
        mode = rng.choice(["half_head", "half_body", "before_answer", "in_backoff", "mid_answer"])
        kind = "abort_" + mode
        with self.lock:
            self.sent[kind] += 1
        conn = None
        t0 = time.monotonic()
        try:
            conn = Conn(self.args.proxy, self.timeout)
            reset = rng.random() < 0.5
            if mode == "half_head":
                conn.send(self.head("GET", "/get?size=100&off=0")[:-rng.randint(3, 40)])
                time.sleep(rng.uniform(0, 0.2))
            elif mode == "half_body":
                n = log_uniform(rng, 64 * KIB, 2 * MIB)
                conn.send(self.head("POST", f"/upload/abort-{n}", ["Content-Type: application/octet-stream", f"Content-Length: {n}"]))
                conn.send(self.pview[:int(n * rng.uniform(0.1, 0.9))])
                time.sleep(rng.uniform(0, 0.2))
            elif mode == "before_answer":
                conn.send(self.head("GET", "/slow?ms=1000&size=1000&off=0"))
                time.sleep(rng.uniform(0.05, 0.5))
            elif mode == "in_backoff":
                conn.send(self.head("GET", f"/backoff/{rng.getrandbits(32)}"))
                time.sleep(rng.uniform(0.1, 0.4))  # the route's backoff is 500 ms..2 s
            else:
                size = log_uniform(rng, MIB, 2 * MIB)
                conn.send(self.head("GET", f"/get?size={size}&off=0"))
                status, version, headers = conn.read_head()
                if status != 200:  # retries ran out (or the budget): nothing big to leave half-way
                    conn.close()
                    self.record(kind, f"got {self.outcome(status, headers)} instead", t0, request=mode)
                    return
                conn.read_exact(rng.randint(1, 256 * KIB), "first part of the answer")
            conn.close(reset=reset)
            self.record(kind, "left" + (" (reset)" if reset else ""), t0, request=mode)
        except (Failure, OSError) as e:
            if conn is not None:
                conn.close()
            self.record(kind, "error before leaving", t0, example={"request": mode, "detail": repr(e)}, request=mode)

    # --- driver -------------------------------------------------------------------------------
    def thread_main(self, kind, rate, seed):
        rng = random.Random(seed)
        fn = getattr(self, "do_" + kind)
        st = {}
        interval = 1.0 / rate if rate > 0 else 0.0
        next_t = time.monotonic() + rng.uniform(0, interval)
        while True:
            now = time.monotonic()
            if now >= self.deadline:
                break
            if interval:
                if next_t > now:
                    time.sleep(min(next_t - now, self.deadline - now))
                    if time.monotonic() >= self.deadline:
                        break
                # no catch-up bursts after a slow request: at most one interval behind
                next_t = max(next_t + interval, time.monotonic() - interval)
            try:
                fn(rng, st)
            except Exception:
                self.record(kind, "load_generator_bug", example={"request": kind, "detail": traceback.format_exc()})
                if st.get("conn"):
                    st["conn"].close()
                st["conn"] = None
                time.sleep(0.1)
        if st.get("conn"):
            st["conn"].close()

    def progress_main(self):
        while True:
            with self.lock:
                done = self.done
            tmp = self.args.progress + ".tmp"
            with open(tmp, "w") as f:
                f.write(f"{done}\n")
            os.rename(tmp, self.args.progress)
            if time.monotonic() >= self.deadline + 60:
                return
            time.sleep(1)

    def stop_early(self, signum, frame):
        """SIGTERM (rebound died, or the soak is interrupted): the threads finish the request in
        hand and the outcomes so far are written as usual."""
        self.deadline = time.monotonic() - 1

    def run(self):
        signal.signal(signal.SIGTERM, self.stop_early)
        threads = []
        base = random.Random(self.args.seed)
        for kind, (share, n) in self.KINDS.items():
            n = max(1, int(round(n * self.args.threads_scale)))
            for i in range(n):
                rate = self.args.rate * share / n if self.args.rate > 0 else 0
                t = threading.Thread(target=self.thread_main, args=(kind, rate, base.getrandbits(64)),
                                     name=f"{kind}-{i}", daemon=True)
                threads.append(t)
        threading.Thread(target=self.progress_main, daemon=True).start()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.monotonic() - self.start
        with self.lock:
            result = {"seconds": elapsed, "sent": dict(self.sent), "bytes": dict(self.bytes),
                      "counts": {k: dict(v) for k, v in self.counts.items()},
                      "latency": {k: {str(b): n for b, n in v.items()} for k, v in self.latency.items()},
                      "examples": self.examples, "notes": dict(self.notes), "slowest": self.slowest,
                      "threads": len(threads),
                      "seed": self.args.seed}
        with open(self.args.out + ".tmp", "w") as f:
            json.dump(result, f)
        os.rename(self.args.out + ".tmp", self.args.out)
        with open(self.args.progress, "w") as f:
            f.write(f"{self.done}\n")


# =============================================================================================
# report

REBOUND_FAILURES = ("no_answer", "no_answer_on_reused_conn", "timeout", "timeout_no_answer", "truncated",
                    "bad_response", "bad_body", "send_failed", "connect_failed")
KIND_ORDER = ["keepalive", "get_cut", "fresh", "post", "post_expect", "chunked", "abort_half_head",
              "abort_half_body", "abort_before_answer", "abort_in_backoff", "abort_mid_answer"]
KIND_DESC = {
    "keepalive": "GET, kept connection (6% via /slow)",
    "get_cut": "GET, upstream resets mid-answer (asked)",
    "fresh": "GET, new connection each (10% HTTP/1.0)",
    "post": "POST upload, Content-Length, 1 KiB-2 MiB",
    "post_expect": "POST upload with Expect: 100-continue",
    "chunked": "PUT upload, chunked, 1 KiB-2 MiB",
    "abort_half_head": "client leaves mid-head",
    "abort_half_body": "client leaves mid-body (64 KiB-2 MiB)",
    "abort_before_answer": "client leaves before a slow answer",
    "abort_in_backoff": "client leaves during a retry backoff",
    "abort_mid_answer": "client leaves mid-answer (1-2 MiB)",
}


def read_meta(d):
    meta = {}
    with open(os.path.join(d, "meta.tsv")) as f:
        for line in f:
            k, _, v = line.rstrip("\n").partition("\t")
            meta[k] = v
    return meta


def percentile_from_hist(hist, p):
    total = sum(hist.values())
    if not total:
        return None
    want, seen = p * total, 0
    for b in sorted(hist):
        seen += hist[b]
        if seen >= want:
            return b
    return max(hist)


def parse_metrics(path):
    series = []
    try:
        with open(path) as f:
            for line in f:
                if not line.strip() or line.startswith("#"):
                    continue
                name_labels, _, value = line.rstrip("\n").rpartition(" ")
                name, _, labels = name_labels.partition("{")
                lab = {}
                for part in labels.rstrip("}").split(","):
                    if "=" in part:
                        k, _, v = part.partition("=")
                        lab[k] = v.strip('"')
                try:
                    series.append((name, lab, float(value)))
                except ValueError:
                    pass
    except FileNotFoundError:
        pass
    return series


def fmt_int(n):
    return f"{int(n):,}"


def report(d):
    meta = read_meta(d)
    loads = []
    for name in sorted(os.listdir(d)):
        if name.startswith("load-") and name.endswith(".json"):
            with open(os.path.join(d, name)) as f:
                loads.append(json.load(f))
    samples = []
    with open(os.path.join(d, "samples.tsv")) as f:
        for line in f:
            t, phase, rss, hwm, fds, thr, ticks, done = line.rstrip("\n").split("\t")
            samples.append(dict(t=float(t), phase=phase, rss=int(rss), hwm=int(hwm), fds=int(fds),
                                threads=int(thr), ticks=int(ticks), done=int(done)))
    try:
        with open(os.path.join(d, "upstream-stats.json")) as f:
            upstream = json.load(f)
    except (FileNotFoundError, json.JSONDecodeError):
        upstream = None

    duration = float(meta["duration"])
    interval = float(meta["interval"])
    clk = int(meta["clk_tck"])
    rss_pct, rss_slack = float(meta["rss_pct"]), float(meta["rss_slack_mib"])
    fd_slack = int(meta["fd_slack"])

    counts = collections.defaultdict(collections.Counter)
    latency = collections.defaultdict(collections.Counter)
    sent = collections.Counter()
    nbytes = collections.Counter()
    examples = []
    notes = collections.Counter()
    slowest = {}
    load_seconds = 0.0
    for ld in loads:
        for k, v in ld["counts"].items():
            counts[k].update(v)
        for k, v in ld["latency"].items():
            latency[k].update({float(b): n for b, n in v.items()})
        sent.update(ld["sent"])
        nbytes.update(ld["bytes"])
        examples += ld["examples"]
        for k, v in ld.get("slowest", {}).items():
            if v[0] > slowest.get(k, (0,))[0]:
                slowest[k] = v
        notes.update(ld.get("notes", {}))
        load_seconds = max(load_seconds, ld["seconds"])

    alive = meta.get("alive") == "yes"
    healthz = meta.get("healthz", "")
    out = []
    p = out.append
    p("## rebound soak test")
    p("")
    p(f"- {meta.get('date', '')}, {meta.get('uname', '')}, {meta.get('ncpu', '?')} CPUs; "
      f"load average before: {meta.get('load_before', '?')}{'; **other busy processes: ' + meta['busy'] + '**' if meta.get('busy') else ''}")
    p(f"- rebound: {meta.get('version', '?')} ({meta.get('rev', '?')}, {meta.get('build', '?')}), "
      f"`workers: {meta.get('workers')}`, log level {meta.get('log_level')}, pid {meta.get('pid')}")
    p(f"- load: {meta.get('clients')} client processes x {loads[0]['threads'] if loads else '?'} threads, "
      f"target {meta.get('rate')} req/s in total, for {duration:.0f} s (ran {load_seconds:.1f} s), "
      f"seed {meta.get('seed')}; then {meta.get('settle')} s without load")
    p(f"- upstream: python3 threads; 503 on {float(meta.get('fail_ratio', 0)) * 100:.0f}% of requests "
      f"(half with Retry-After: 0), reset before the answer on {float(meta.get('reset_ratio', 0)) * 100:.0f}%, "
      f"keep-alive closed after {float(meta.get('close_ratio', 0)) * 100:.0f}% of answers, idle keep-alive closed "
      f"after {meta.get('upstream_idle')} s")
    p(f"- rebound policy: `max_retries: 3`, backoff 2-50 ms full jitter, `max_retry_body: {meta.get('max_retry_body')}` "
      f"(larger uploads stream once), budget 20%/10 s with a floor of 1000, breaker in `signal` mode; "
      f"config in the temp dir as `rebound.yaml`")
    p(f"- sampled every {interval:g} s: VmRSS and VmHWM from /proc/PID/status, open fds from /proc/PID/fd, "
      f"threads, CPU from /proc/PID/stat")
    p("")

    # ---- requests
    total_sent = sum(sent.values())
    total_done = sum(sum(c.values()) for c in counts.values())
    p(f"### Requests ({fmt_int(total_sent)} sent, {fmt_int(total_done)} finished, "
      f"{total_done / max(load_seconds, 1e-9):,.0f}/s; {nbytes['up'] / MIB:,.0f} MiB up, {nbytes['down'] / MIB:,.0f} MiB down)")
    p("")
    p("| kind | what | sent | outcomes | p50 / p99 of 200s | slowest (outcome, when) |")
    p("|---|---|---:|---|---|---|")
    kinds = [k for k in KIND_ORDER if k in counts or k in sent] + sorted(k for k in counts if k not in KIND_ORDER)
    for k in kinds:
        oc = ", ".join(f"{o}: {fmt_int(n)}" for o, n in sorted(counts[k].items(), key=lambda x: (-x[1], x[0])) if n)
        p50, p99 = percentile_from_hist(latency[k], 0.5), percentile_from_hist(latency[k], 0.99)
        lat = f"{p50:g} / {p99:g} ms" if p50 is not None else ""
        sl = slowest.get(k)
        sl = f"{sl[0] / 1000:.2f} s ({sl[1]}, t={sl[3]:g} s)" if sl else ""
        p(f"| {k} | {KIND_DESC.get(k, '')} | {fmt_int(sent[k])} | {oc} | {lat} | {sl} |")
    p("")

    statuses = collections.Counter()
    for k, c in counts.items():
        for o, n in c.items():
            if o.split(" ")[0].isdigit():
                statuses[o] += n
    p("Status codes of all answered well-formed requests: " +
      ", ".join(f"**{s}**: {fmt_int(n)}" for s, n in sorted(statuses.items())) + ".")
    p("")

    if notes:
        p("Noted: " + ", ".join(f"{k}: {v}" for k, v in sorted(notes.items())) + ".")
        p("")

    failures = collections.Counter()
    for k, c in counts.items():
        if k.startswith("abort_"):
            continue
        for o, n in c.items():
            if o in REBOUND_FAILURES or o == "load_generator_bug":
                failures[o] += n
    fail_total = sum(v for k, v in failures.items() if k != "load_generator_bug")
    if fail_total:
        p(f"**Connection-level failures on well-formed requests: {fmt_int(fail_total)}** "
          f"({', '.join(f'{k}: {v}' for k, v in sorted(failures.items()))}). First ones:")
        p("")
        for ex in [e for e in examples if e["outcome"] in REBOUND_FAILURES][:12]:
            p(f"- t={ex['t']} s, {ex['kind']}: `{ex['request']}` -> {ex['outcome']}: {ex['detail'][:300]}")
        p("")
    else:
        p("Connection-level failures on well-formed requests (no answer, reset or timeout without an answer, "
          "a cut answer not asked for, a wrong body): **none**.")
        p("")
    bugs = [e for e in examples if e["outcome"] == "load_generator_bug"]
    if bugs:
        p(f"**The load generator itself failed {failures['load_generator_bug']} times** (a bug in soak.py):")
        p("")
        p("```")
        p(bugs[0]["detail"][-1500:])
        p("```")
        p("")
    aborts_bad = sum(n for k, c in counts.items() if k.startswith("abort_") for o, n in c.items() if o.startswith("error"))
    if aborts_bad:
        p(f"Aborting clients that failed before they could leave (connect, send or read failed): {aborts_bad}. First ones:")
        p("")
        for ex in [e for e in examples if e["kind"].startswith("abort_")][:5]:
            p(f"- t={ex['t']} s, {ex['kind']}: {ex['detail'][:300]}")
        p("")

    # ---- upstream and rebound's own view
    if upstream:
        c = upstream["counts"]
        keys = ["requests", "connections", "answered_503", "answered_503_retry_after_0", "answered_503_before_body",
                "reset_before_head", "cut_mid_response", "closed_after_response", "answered_200_cl",
                "answered_200_chunked", "answered_200_close", "expect_100_continue", "request_trailer_fields",
                "request_body_cut_short", "closed_idle_keepalive", "closed_by_peer", "upstream_exception"]
        p("Upstream's count: " + ", ".join(f"{k} {fmt_int(c[k])}" for k in keys if c.get(k)) +
          (f"; other: {', '.join(f'{k} {v}' for k, v in sorted(c.items()) if k not in keys and not k.startswith('method_') and k != 'request_body_bytes')}" if any(k not in keys and not k.startswith('method_') and k != 'request_body_bytes' for k in c) else "") + ".")
        if upstream.get("examples"):
            p("")
            p("Upstream exceptions (first):")
            p("```")
            p(upstream["examples"][0][-1500:])
            p("```")
        p("")

    metrics = parse_metrics(os.path.join(d, "metrics.txt"))
    if metrics:
        by_code = collections.Counter()
        attempts = collections.Counter()
        other = {}
        for name, lab, v in metrics:
            if name == "proxy_requests_total":
                by_code[lab.get("code", "?")] += v
            elif name == "retry_attempts_total":
                attempts[lab.get("attempt_number", "?")] += v
            elif name in ("retry_exhausted_total", "circuit_breaker_state", "retry_budget_utilization_ratio") and lab.get("dependency") == "soak-upstream":
                other[name] = v
            elif name == "upstream_request_duration_seconds_count" and lab.get("dependency") == "soak-upstream":
                other["upstream attempts timed"] = v
        p("rebound's `/metrics` at the end: `proxy_requests_total` by code " +
          ", ".join(f"{k}: {fmt_int(v)}" for k, v in sorted(by_code.items())) +
          f" (sum {fmt_int(sum(by_code.values()))}); `retry_attempts_total` by attempt " +
          ", ".join(f"{k}: {fmt_int(v)}" for k, v in sorted(attempts.items())) +
          f" (sum {fmt_int(sum(attempts.values()))}); " +
          ", ".join(f"`{k}` {v:g}" for k, v in other.items()) + ".")
        p("")
    else:
        p("**/metrics could not be scraped at the end.**")
        p("")
    try:
        with open(os.path.join(d, "log-events.tsv")) as f:
            ev = [line.rstrip("\n").split("\t") for line in f if line.strip()]
        p("rebound's log events: " + ", ".join(f"{e[1]} {fmt_int(e[0])}" for e in ev) + ".")
        bad = [e for e in ev if e[1] in ("internal_error", "accept_failed", "startup_failed")]
        if bad:
            p("")
            p(f"**rebound logged {', '.join(e[1] + ' x' + e[0] for e in bad)}** (see the first lines below).")
            try:
                with open(os.path.join(d, "log-bad-lines.txt")) as f:
                    p("```")
                    p(f.read()[-3000:].rstrip())
                    p("```")
            except FileNotFoundError:
                pass
        p("")
    except FileNotFoundError:
        pass

    # ---- samples
    p("### Samples")
    p("")
    p("| t (s) | phase | RSS MiB | peak RSS MiB | fds | threads | CPU % since last | requests done |")
    p("|---:|---|---:|---:|---:|---:|---:|---:|")
    prev = None
    for s in samples:
        cpu = ""
        if prev is not None and s["t"] > prev["t"]:
            cpu = f"{100 * (s['ticks'] - prev['ticks']) / clk / (s['t'] - prev['t']):.0f}"
        p(f"| {s['t']:.0f} | {s['phase']} | {s['rss'] / 1024:.1f} | {s['hwm'] / 1024:.1f} | {s['fds']} | {s['threads']} | {cpu} | {fmt_int(s['done'])} |")
        prev = s
    p("")

    # ---- verdict
    load_s = [s for s in samples if s["phase"] == "load"]
    second = [s for s in load_s if duration / 3 <= s["t"] < 2 * duration / 3]
    last = [s for s in load_s if s["t"] >= 2 * duration / 3]
    idle0 = [s for s in samples if s["phase"] == "idle"]
    final = samples[-1] if samples else None
    verdict_ok = True
    p("### Verdict")
    p("")
    if len(second) >= 1 and len(last) >= 1:
        m2 = statistics.median(s["rss"] for s in second) / 1024
        m3 = statistics.median(s["rss"] for s in last) / 1024
        limit = m2 * (1 + rss_pct / 100) + rss_slack
        rss_flat = m3 <= limit
        post = [s for s in load_s if s["t"] >= duration / 3]
        slope = ""
        if len(post) >= 3 and post[-1]["t"] - post[0]["t"] >= 300:  # shorter spans overstate it
            xs = [s["t"] for s in post]
            ys = [s["rss"] / 1024 for s in post]
            mx, my = statistics.fmean(xs), statistics.fmean(ys)
            sxx = sum((x - mx) ** 2 for x in xs)
            if sxx > 0:
                b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
                slope = f"; least-squares slope after warm-up {b * 3600:+.1f} MiB/hour (informational)"
        p(f"- **RSS flat: {'yes' if rss_flat else 'no'}.** Rule: the first third of the load "
          f"({duration / 3:.0f} s) is warm-up; the median VmRSS of the last third must be at most the median of "
          f"the second third x {1 + rss_pct / 100:.2f} + {rss_slack:g} MiB. Second third {m2:.1f} MiB "
          f"({len(second)} samples), last third {m3:.1f} MiB ({len(last)} samples), limit {limit:.1f} MiB"
          f"{slope}. Start {idle0[0]['rss'] / 1024 if idle0 else float('nan'):.1f} MiB idle, "
          f"{final['rss'] / 1024:.1f} MiB at the end, peak {max(s['hwm'] for s in samples) / 1024:.1f} MiB.")
        fm2 = statistics.median(s["fds"] for s in second)
        fm3 = statistics.median(s["fds"] for s in last)
        fd_load_limit = fm2 * 1.25 + 2 * fd_slack
        base = idle0[0]["fds"] if idle0 else None
        fd_end_ok = base is not None and final["phase"] == "settle" and final["fds"] <= base + fd_slack
        fd_load_ok = fm3 <= fd_load_limit
        fds_flat = fd_end_ok and fd_load_ok
        p(f"- **fds flat: {'yes' if fds_flat else 'no'}.** Rule: (a) under load, the median fd count of the last "
          f"third is at most the second third's x 1.25 + {2 * fd_slack} (client and pooled connections come "
          f"and go): {fm2:g} -> {fm3:g}, limit {fd_load_limit:g}: {'ok' if fd_load_ok else '**exceeded**'}; (b) "
          f"{meta.get('settle')} s after the load stopped (the upstream closes idle keep-alive connections after "
          f"{meta.get('upstream_idle')} s, rebound's pool sweep runs every 5 s) the count is back within "
          f"{fd_slack} of the idle count before the load: {base} before, {final['fds']} at the end: "
          f"{'ok' if fd_end_ok else '**not back**'}.")
        verdict_ok = rss_flat and fds_flat
    else:
        p("- **RSS flat: no. fds flat: no.** Too few samples under load to judge (rebound died, or the run was too short).")
        verdict_ok = False
    for name in ("fd-kinds-idle.txt", "fd-kinds-end.txt"):
        try:
            with open(os.path.join(d, name)) as f:
                kinds_txt = ", ".join(" ".join(line.split()[1:]) + " " + line.split()[0] for line in f if line.strip())
            p(f"  - fds by kind, {'before the load' if 'idle' in name else 'at the end'}: {kinds_txt}")
        except FileNotFoundError:
            pass
    p(f"- **rebound alive to the end: {'yes' if alive else 'no'}**"
      + ("" if alive else f" ({meta.get('death', 'it exited')})")
      + f"; `/healthz` at the end: {healthz or 'no answer'}.")
    drain = meta.get("drain_rc", "")
    if drain:
        p(f"- After the report data was taken, SIGTERM: rebound exited {drain}"
          + (" (its contract: drain and exit 0)." if drain == "0" else " **(expected 0)**."))
    ok = verdict_ok and alive and healthz == "200 ok"
    p("")
    p(f"**Result: {'PASS' if ok else 'FAIL'}**" + ("" if fail_total == 0 else
      f" (and {fmt_int(fail_total)} connection-level failures above, which do not decide the result)"))
    print("\n".join(out))
    return 0 if ok else 1


# =============================================================================================

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    u = sub.add_parser("upstream")
    u.add_argument("port_file")
    u.add_argument("--fail-ratio", type=float, default=0.2)
    u.add_argument("--reset-ratio", type=float, default=0.01)
    u.add_argument("--close-ratio", type=float, default=0.03)
    u.add_argument("--idle", type=float, default=5.0)
    u.add_argument("--seed", type=int, default=1)
    lo = sub.add_parser("load")
    lo.add_argument("--proxy", type=int, required=True)
    lo.add_argument("--upstream", type=int, required=True)
    lo.add_argument("--duration", type=float, required=True)
    lo.add_argument("--rate", type=float, default=0)
    lo.add_argument("--threads-scale", type=float, default=1.0)
    lo.add_argument("--out", required=True)
    lo.add_argument("--progress", required=True)
    lo.add_argument("--seed", type=int, default=1)
    r = sub.add_parser("report")
    r.add_argument("dir")
    args = ap.parse_args()
    if args.cmd == "upstream":
        run_upstream(args)
    elif args.cmd == "load":
        Load(args).run()
    else:
        sys.exit(report(args.dir))


if __name__ == "__main__":
    main()
