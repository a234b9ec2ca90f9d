#!/usr/bin/python3
"""Real gRPC peers (Debian's python3-grpcio) for rebound's integration tests.

  grpc_peer.py server PORT_FILE      serves until killed; writes its port to PORT_FILE
  grpc_peer.py server-tls PORT_FILE CERT KEY
                                     the same over TLS (PEM certificate chain and key files)
  grpc_peer.py server-at PORT_FILE ADDRESS:PORT [unavailable]
                                     on that address; `unavailable`: every call fails UNAVAILABLE
  grpc_peer.py call TARGET METHOD [--timeout S] [--meta k=v ...] [--payload TEXT]
                                [--kind unary|server-stream|client-stream|bidi]
                                [--messages a,b,c | --repeat N --size S] [--summary]
                                [--cancel-after S [--calls N]] [--concurrent N]
                                     one call; prints a JSON line with the outcome (a stream's
                                     messages joined by "|" as its body). A bidi call goes in
                                     lockstep: each message waits for the answer to the one
                                     before, which only a proxy that relays as they arrive
                                     can serve. With --cancel-after, a unary call is
                                     cancelled by its client (RST_STREAM CANCEL) after S
                                     seconds, N times one after another. With
                                     --concurrent, N unary calls go at once on one
                                     channel; the code is 0 when all succeeded.

The server answers every method (a generic handler, raw bytes, no protoc). What it does is
chosen by the method's name and the call's metadata, so a test script reads as a sentence:
  /test.Peer/Echo          echoes the request
  /test.Peer/Fail          fails the first `x-fail-times` calls of `x-call-id` with status
                           `x-fail-code` (trailers-only, before any message), then echoes
  /test.Peer/Slow          sleeps `x-sleep-ms`, then echoes
  /test.Peer/Count         server streaming: answers "m0".."m{N-1}" for a request "N"; with
                           `x-fail-after` K, fails UNAVAILABLE after K messages; with
                           `x-size` S, each message is padded to S bytes; with `x-gap-ms`,
                           waits that long before each message after the first; with
                           `x-progress-file`, writes there how many messages went out
  /test.Peer/Collect       client streaming: answers the request messages joined by "+", or
                           "COUNT:BYTES" with `x-summary`
  /test.Peer/Chat          bidirectional: answers "echo:" + each message as it arrives
The streaming methods fail like Fail, before any message, when `x-fail-times` is given.
Every answer's trailing metadata says what the server saw: the attempt number for the call
id, the idempotency key, grpc-previous-rpc-attempts and the time the call had left.
"""
import json
import sys
import threading
import time
from concurrent import futures

import grpc

_lock = threading.Lock()
_seen = {}


def _meta(context):
    return {k: v for k, v in context.invocation_metadata()}


def _begin(context):
    """Counts the attempt of the call's id; returns its metadata, number and trailing metadata."""
    meta = _meta(context)
    call_id = meta.get("x-call-id", "")
    with _lock:
        _seen[call_id] = _seen.get(call_id, 0) + 1
        attempt = _seen[call_id]
    left = context.time_remaining()
    trailing = [
        ("x-attempt", str(attempt)),
        ("x-idempotency-key", meta.get("idempotency-key", "")),
        ("x-previous-attempts", meta.get("grpc-previous-rpc-attempts", "")),
        ("x-authorization", meta.get("authorization", "")),
        ("x-time-left-ms", "" if left is None else str(int(left * 1000))),
    ]
    return meta, attempt, trailing


def _fail_if_scripted(context, meta, attempt, trailing):
    if attempt <= int(meta.get("x-fail-times", "0")):
        context.set_trailing_metadata(trailing)
        context.abort(grpc.StatusCode(_code(int(meta.get("x-fail-code", "14")))), "scripted failure %d" % attempt)


def _count(request, context):
    meta, attempt, trailing = _begin(context)
    _fail_if_scripted(context, meta, attempt, trailing)
    fail_after = int(meta.get("x-fail-after", "-1"))
    context.set_trailing_metadata(trailing)
    for i in range(int(request.decode() or "0")):
        if i > 0 and "x-gap-ms" in meta:
            time.sleep(int(meta["x-gap-ms"]) / 1000.0)
        if i == fail_after:
            context.abort(grpc.StatusCode.UNAVAILABLE, "failed after %d messages" % i)
        m = ("m%d" % i).encode()
        yield m + b"." * max(0, int(meta.get("x-size", "0")) - len(m))
        if "x-progress-file" in meta:
            with open(meta["x-progress-file"], "w") as f:
                f.write(str(i + 1))
    if fail_after >= 0:
        context.abort(grpc.StatusCode.UNAVAILABLE, "failed after the messages")


def _collect(request_iterator, context):
    meta, attempt, trailing = _begin(context)
    got = [m.decode() for m in request_iterator]
    _fail_if_scripted(context, meta, attempt, trailing)
    context.set_trailing_metadata(trailing)
    if "x-summary" in meta:
        return ("%d:%d" % (len(got), sum(len(m) for m in got))).encode()
    return "+".join(got).encode()


def _chat(request_iterator, context):
    meta, attempt, trailing = _begin(context)
    _fail_if_scripted(context, meta, attempt, trailing)
    context.set_trailing_metadata(trailing)
    for m in request_iterator:
        yield b"echo:" + m


_down = False  # server-at ... unavailable: every call fails UNAVAILABLE, as a host that is going down


def _handle(request, context):
    method = context._rpc_event.call_details.method.decode() if hasattr(context, "_rpc_event") else ""
    meta, attempt, trailing = _begin(context)
    if _down:
        context.set_trailing_metadata(trailing)
        context.abort(grpc.StatusCode.UNAVAILABLE, "this host is unavailable")
    if method.endswith("/Fail") and "x-fail-times" not in meta:
        meta["x-fail-times"] = "1000000"
    if method.endswith("/Fail"):
        _fail_if_scripted(context, meta, attempt, trailing)
    if method.endswith("/Slow"):
        time.sleep(int(meta.get("x-sleep-ms", "0")) / 1000.0)
    context.set_trailing_metadata(trailing)
    return request


def _code(n):
    for c in grpc.StatusCode:
        if c.value[0] == n:
            return c.value
    return grpc.StatusCode.UNKNOWN.value


class _Generic(grpc.GenericRpcHandler):
    def service(self, handler_call_details):
        method = handler_call_details.method
        if method.endswith("/Count"):
            return grpc.unary_stream_rpc_method_handler(_count)
        if method.endswith("/Collect"):
            return grpc.stream_unary_rpc_method_handler(_collect)
        if method.endswith("/Chat"):
            return grpc.stream_stream_rpc_method_handler(_chat)
        return grpc.unary_unary_rpc_method_handler(_handle)


def serve(port_file, cert_file=None, key_file=None, bind="127.0.0.1:0"):
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
    server.add_generic_rpc_handlers((_Generic(),))
    if cert_file:
        with open(cert_file, "rb") as f:
            cert = f.read()
        with open(key_file, "rb") as f:
            key = f.read()
        port = server.add_secure_port(bind, grpc.ssl_server_credentials(((key, cert),)))
    else:
        port = server.add_insecure_port(bind)
    server.start()
    with open(port_file + ".tmp", "w") as f:
        f.write(str(port))
    import os
    os.rename(port_file + ".tmp", port_file)
    server.wait_for_termination()


def _body(got, summary):
    if summary:
        return "%d:%d" % (len(got), sum(len(m) for m in got))
    return "|".join(m.decode(errors="replace") for m in got)


def _lockstep(fn, messages, timeout, meta, got):
    """Sends each message only once the answer to the one before has come back."""
    import queue
    q = queue.Queue()

    def requests():
        while True:
            m = q.get()
            if m is None:
                return
            yield m

    c = fn(requests(), timeout=timeout, metadata=meta)
    try:
        for m in messages:
            q.put(m)
            got.append(next(c))
    finally:
        q.put(None)
    for m in c:
        got.append(m)
    return c


def call(target, method, args):
    timeout = None
    meta = []
    payload = b"hello"
    kind = "unary"
    messages = []
    summary = False
    cancel_after = None
    calls = 1
    concurrent = 0
    i = 0
    while i < len(args):
        if args[i] == "--timeout":
            timeout = float(args[i + 1])
            i += 2
        elif args[i] == "--meta":
            k, v = args[i + 1].split("=", 1)
            meta.append((k, v))
            i += 2
        elif args[i] == "--payload":
            payload = args[i + 1].encode()
            i += 2
        elif args[i] == "--kind":
            kind = args[i + 1]
            i += 2
        elif args[i] == "--messages":
            messages = [m.encode() for m in args[i + 1].split(",")]
            i += 2
        elif args[i] == "--repeat":
            messages = [b"x" * int(args[i + 3])] * int(args[i + 1])  # --repeat N --size S
            i += 4
        elif args[i] == "--cancel-after":
            cancel_after = float(args[i + 1])
            i += 2
        elif args[i] == "--concurrent":
            concurrent = int(args[i + 1])
            i += 2
        elif args[i] == "--calls":
            calls = int(args[i + 1])
            i += 2
        elif args[i] == "--summary":
            summary = True  # a stream's messages counted, not printed
            i += 1
        else:
            raise SystemExit("unknown argument " + args[i])
    # The channel targets rebound directly (h2c, prior knowledge); the authority names the
    # dependency, as a Host does for HTTP/1.1. No proxy, and gRPC's own retries off, so
    # every retry seen is rebound's.
    authority = dict(meta).pop("x-authority", None)
    opts = [("grpc.enable_retries", 0), ("grpc.enable_http_proxy", 0)]
    if authority:
        opts.append(("grpc.default_authority", authority))
    meta = [(k, v) for k, v in meta if k != "x-authority"]
    out = {}
    with grpc.insecure_channel(target, options=opts) as ch:
        got = []
        try:
            if cancel_after is not None:
                for _ in range(calls):
                    f = ch.unary_unary(method).future(payload, timeout=timeout, metadata=meta)
                    time.sleep(cancel_after)
                    f.cancel()
                    try:
                        f.result()
                    except grpc.FutureCancelledError:
                        pass
                print(json.dumps({"code": grpc.StatusCode.CANCELLED.value[0], "cancelled": calls}))
                return
            if concurrent:
                fs = [ch.unary_unary(method).future(payload, timeout=timeout, metadata=meta) for _ in range(concurrent)]
                failed = 0
                for f in fs:
                    try:
                        f.result()
                    except grpc.RpcError:
                        failed += 1
                print(json.dumps({"code": 0 if failed == 0 else 2, "details": "%d failed" % failed}))
                return
            if kind == "unary":
                resp, c = ch.unary_unary(method).with_call(payload, timeout=timeout, metadata=meta)
                got.append(resp)
            elif kind == "client-stream":
                resp, c = ch.stream_unary(method).with_call(iter(messages), timeout=timeout, metadata=meta)
                got.append(resp)
            elif kind == "server-stream":
                c = ch.unary_stream(method)(payload, timeout=timeout, metadata=meta)
                for m in c:
                    got.append(m)
            elif kind == "bidi":
                c = _lockstep(ch.stream_stream(method), messages, timeout, meta, got)
            elif kind == "open-stream":  # one message, then the stream stays open until the call ends
                ended = threading.Event()

                def one_then_wait():
                    yield b"first"
                    ended.wait()

                try:
                    resp, c = ch.stream_unary(method).with_call(one_then_wait(), timeout=timeout, metadata=meta)
                finally:
                    ended.set()
                got.append(resp)
            else:
                raise SystemExit("unknown kind " + kind)
            out["code"] = 0
            out["body"] = _body(got, summary)
            trailing = c.trailing_metadata()
            initial = c.initial_metadata()
        except grpc.RpcError as e:
            out["body"] = _body(got, summary)
            out["code"] = e.code().value[0]
            out["details"] = e.details()
            trailing = e.trailing_metadata()
            initial = e.initial_metadata()
        out["trailing"] = {k: v for k, v in (trailing or [])}
        out["initial"] = {k: v for k, v in (initial or [])}
    print(json.dumps(out))


if __name__ == "__main__":
    if sys.argv[1] == "server":
        serve(sys.argv[2])
    elif sys.argv[1] == "server-tls":
        serve(sys.argv[2], sys.argv[3], sys.argv[4])
    elif sys.argv[1] == "server-at":  # server-at PORT_FILE ADDRESS:PORT [unavailable]
        _down = sys.argv[4:5] == ["unavailable"]
        serve(sys.argv[2], bind=sys.argv[3])
    elif sys.argv[1] == "call":
        call(sys.argv[2], sys.argv[3], sys.argv[4:])
    else:
        raise SystemExit(__doc__)
