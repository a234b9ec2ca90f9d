#!/usr/bin/python3
"""Real gRPC peers (Debian's python3-grpcio) for rebound's integration tests.

  grpc_peer.py server PORT_FILE      serves until killed; writes its port to PORT_FILE
  grpc_peer.py server-tls PORT_FILE CERT KEY
                                     the same over TLS (PEM certificate chain and key files)
  grpc_peer.py call TARGET METHOD [--timeout S] [--meta k=v ...] [--payload TEXT]
                                     one unary call; prints a JSON line with the outcome

The server answers every method (a generic handler, raw bytes, no protoc). What it does is
chosen by the method's name and the call's metadata, so a test script reads as a sentence:
  /test.Peer/Echo          echoes the request
  /test.Peer/Fail          fails the first `x-fail-times` calls of `x-call-id` with status
                           `x-fail-code` (trailers-only, before any message), then echoes
  /test.Peer/Slow          sleeps `x-sleep-ms`, then echoes
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


def _handle(request, context):
    meta = _meta(context)
    method = context._rpc_event.call_details.method.decode() if hasattr(context, "_rpc_event") else ""
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
    if method.endswith("/Fail") and attempt <= int(meta.get("x-fail-times", "1000000")):
        context.set_trailing_metadata(trailing)
        context.abort(grpc.StatusCode(_code(int(meta.get("x-fail-code", "14")))), "scripted failure %d" % attempt)
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
        return grpc.unary_unary_rpc_method_handler(_handle)


def serve(port_file, cert_file=None, key_file=None):
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
    server.add_generic_rpc_handlers((_Generic(),))
    if cert_file:
        with open(cert_file, "rb") as f:
            cert = f.read()
        with open(key_file, "rb") as f:
            key = f.read()
        port = server.add_secure_port("127.0.0.1:0", grpc.ssl_server_credentials(((key, cert),)))
    else:
        port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    with open(port_file + ".tmp", "w") as f:
        f.write(str(port))
    import os
    os.rename(port_file + ".tmp", port_file)
    server.wait_for_termination()


def call(target, method, args):
    timeout = None
    meta = []
    payload = b"hello"
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
        fn = ch.unary_unary(method)
        try:
            resp, c = fn.with_call(payload, timeout=timeout, metadata=meta)
            out["code"] = 0
            out["body"] = resp.decode(errors="replace")
            trailing = c.trailing_metadata()
            initial = c.initial_metadata()
        except grpc.RpcError as e:
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
    elif sys.argv[1] == "call":
        call(sys.argv[2], sys.argv[3], sys.argv[4:])
    else:
        raise SystemExit(__doc__)
