#!/usr/bin/python3
"""A scripted HTTP/2 upstream (h2c, prior knowledge) for rebound's gRPC wire tests, built on
hyper-h2 (Debian's python3-h2), so a test can make the HTTP/2 layer misbehave in ways a real
gRPC server never does on request: refuse a stream, send GOAWAY below a stream, reset it.

  h2_peer.py PORT_FILE      binds 127.0.0.1:0, writes the port to PORT_FILE (atomically, by
                            rename) and serves until killed, a thread per connection

What it does is chosen by the request's :path; a request is a stream whose request ended,
and every path has its own count of requests seen:
  /peer.Svc/RefuseOnce   the first request: RST_STREAM(REFUSED_STREAM); later ones: OK
  /peer.Svc/GoawayOnce   the first request: GOAWAY with last_stream_id below it (never
                         processed), and the connection is closed; later ones: OK
  /peer.Svc/Pushback     the first request: a trailers-only UNAVAILABLE with
                         grpc-retry-pushback-ms = the request's `x-pushback`; later: OK, its
                         trailers with `x-gap-ms`, the milliseconds since the first request
  /peer.Svc/Reset        every request: RST_STREAM(INTERNAL_ERROR)
  /peer.Svc/Seen         OK; its trailers' `x-seen` is the count of the path named by the
                         request's `x-of` header (how a test reads what the peer saw)
  /peer.Svc/Big          OK with a message of 4,000,000 bytes, sent as fast as the window allows
  anything else          OK, the request's message echoed
An OK answer is :status 200 with content-type application/grpc, one DATA frame holding a
5-byte-prefixed message, then trailers: grpc-status 0 and `x-seen` (this path's count,
this request included).
"""
import os
import socket
import struct
import sys
import threading
import time

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions

_lock = threading.Lock()
_seen = {}        # path -> requests seen
_first_at = {}    # path -> monotonic time of its first request


def _count(path):
    with _lock:
        n = _seen.get(path, 0) + 1
        _seen[path] = n
        if n == 1:
            _first_at[path] = time.monotonic()
        return n


def _seen_of(path):
    with _lock:
        return _seen.get(path, 0)


def _gap_ms(path):
    with _lock:
        t = _first_at.get(path)
    return 0 if t is None else int((time.monotonic() - t) * 1000)


def _grpc_message(payload):
    return struct.pack(">BI", 0, len(payload)) + payload


_BIG = _grpc_message(b"b" * 4_000_000)


class _Stream:
    def __init__(self, headers):
        self.headers = headers
        self.body = bytearray()


class _Conn:
    def __init__(self, sock):
        self.sock = sock
        self.conn = h2.connection.H2Connection(
            config=h2.config.H2Configuration(client_side=False, header_encoding="utf-8"))
        self.streams = {}   # stream id -> _Stream (request in progress)
        self.pending = {}   # stream id -> [bytes left to send, trailers]
        self.closing = False

    def flush(self):
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def run(self):
        try:
            self.conn.initiate_connection()
            self.flush()
            while not self.closing:
                data = self.sock.recv(65536)
                if not data:
                    break
                try:
                    events = self.conn.receive_data(data)
                except h2.exceptions.ProtocolError:
                    self.flush()
                    break
                for ev in events:
                    self.on_event(ev)
                    if self.closing:
                        break
                self.flush()
        except OSError:
            pass
        finally:
            self.close()

    def close(self):
        try:
            if self.closing:
                # GOAWAY sent and flushed: half-close, then read what the client still sends
                # until it closes too, so no unread bytes turn our close into a TCP RST that
                # could overtake the GOAWAY.
                self.sock.shutdown(socket.SHUT_WR)
                self.sock.settimeout(2.0)
                while self.sock.recv(65536):
                    pass
        except OSError:
            pass
        try:
            self.sock.close()
        except OSError:
            pass

    def on_event(self, ev):
        if isinstance(ev, h2.events.RequestReceived):
            self.streams[ev.stream_id] = _Stream(dict(ev.headers))
            if ev.stream_ended:
                self.on_request(ev.stream_id)
        elif isinstance(ev, h2.events.DataReceived):
            if ev.flow_controlled_length:
                self.conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            s = self.streams.get(ev.stream_id)
            if s is not None:
                s.body += ev.data
            if ev.stream_ended:
                self.on_request(ev.stream_id)
        elif isinstance(ev, h2.events.TrailersReceived):
            if ev.stream_ended:
                self.on_request(ev.stream_id)
        elif isinstance(ev, h2.events.StreamEnded):
            self.on_request(ev.stream_id)
        elif isinstance(ev, h2.events.StreamReset):
            self.streams.pop(ev.stream_id, None)
            self.pending.pop(ev.stream_id, None)
        elif isinstance(ev, h2.events.WindowUpdated):
            for sid in list(self.pending):
                self.send_pending(sid)
        elif isinstance(ev, h2.events.RemoteSettingsChanged):
            for sid in list(self.pending):
                self.send_pending(sid)
        elif isinstance(ev, h2.events.ConnectionTerminated):
            self.closing = True

    def on_request(self, sid):
        s = self.streams.pop(sid, None)
        if s is None:
            return  # already answered (StreamEnded after the event that carried the end)
        path = s.headers.get(":path", "")
        n = _count(path)
        if path == "/peer.Svc/RefuseOnce" and n == 1:
            self.conn.reset_stream(sid, error_code=h2.errors.ErrorCodes.REFUSED_STREAM)
        elif path == "/peer.Svc/GoawayOnce" and n == 1:
            self.conn.close_connection(error_code=h2.errors.ErrorCodes.NO_ERROR,
                                       last_stream_id=max(sid - 2, 0))
            self.flush()
            self.closing = True
        elif path == "/peer.Svc/Pushback" and n == 1:
            self.conn.send_headers(sid, [
                (":status", "200"),
                ("content-type", "application/grpc"),
                ("grpc-status", "14"),
                ("grpc-message", "pushed back"),
            ] + ([("grpc-retry-pushback-ms", s.headers["x-pushback"])] if "x-pushback" in s.headers else []),
                end_stream=True)
        elif path == "/peer.Svc/Pushback":
            self.answer_ok(sid, b"ok", [("x-seen", str(n)), ("x-gap-ms", str(_gap_ms(path)))])
        elif path == "/peer.Svc/Reset":
            self.conn.reset_stream(sid, error_code=h2.errors.ErrorCodes.INTERNAL_ERROR)
        elif path == "/peer.Svc/Big":
            self.answer_ok(sid, _BIG, [("x-seen", str(n))], framed=True)
        elif path == "/peer.Svc/Seen":
            self.answer_ok(sid, b"seen", [("x-seen", str(_seen_of(s.headers.get("x-of", ""))))])
        elif path in ("/peer.Svc/RefuseOnce", "/peer.Svc/GoawayOnce"):
            self.answer_ok(sid, b"ok", [("x-seen", str(n))])
        else:
            # Echo: the request's message, framing and all.
            body = bytes(s.body) if s.body else _grpc_message(b"")
            self.answer_ok(sid, body, [("x-seen", str(n)), ("x-grpc-timeout", s.headers.get("grpc-timeout", ""))],
                           framed=True)

    def answer_ok(self, sid, payload, extra_trailers, framed=False):
        self.conn.send_headers(sid, [(":status", "200"), ("content-type", "application/grpc")])
        data = payload if framed else _grpc_message(payload)
        self.pending[sid] = [data, [("grpc-status", "0")] + extra_trailers]
        self.send_pending(sid)

    def send_pending(self, sid):
        """Sends what flow control allows; the trailers (END_STREAM) once all data is out."""
        entry = self.pending.get(sid)
        if entry is None:
            return
        data, trailers = entry
        try:
            while data:
                window = self.conn.local_flow_control_window(sid)
                if window <= 0:
                    break
                n = min(window, self.conn.max_outbound_frame_size, len(data))
                self.conn.send_data(sid, data[:n])
                data = data[n:]
            entry[0] = data
            if not data:
                del self.pending[sid]
                self.conn.send_headers(sid, trailers, end_stream=True)
        except (h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError):
            self.pending.pop(sid, None)


def main(port_file):
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    with open(port_file + ".tmp", "w") as f:
        f.write(str(srv.getsockname()[1]))
    os.rename(port_file + ".tmp", port_file)
    while True:
        sock, _ = srv.accept()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=_Conn(sock).run, daemon=True).start()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    main(sys.argv[1])
