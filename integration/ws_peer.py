#!/usr/bin/env python3
"""WebSocket peers for rebound's upgrade tests (issue 32), on Debian's python3-websockets.

  server PORT_FILE [CERT KEY]   an echo server (TLS with CERT and KEY), by path:
      /echo              echoes every message
      /refuse-once       the first handshake gets 503 + Retry-After: 1, later ones echo
      /reset-after-open  switches, then drops the TCP connection at once
      /plain             answers 200 without switching (an upstream that ignores Upgrade)
      /seen?PATH         JSON: handshakes seen on PATH and the last one's header fields
  client REBOUND_PORT URI       one connection through rebound in origin form (the socket is
      rebound's, the Host is URI's): a text, a binary and a 1 MiB message echoed, then a
      close; prints what happened as JSON
"""
import asyncio
import http
import json
import os
import socket
import ssl
import sys

import websockets

seen = {}  # path -> {"count": n, "headers": {...}}


async def process_request(path, headers):
    route, _, query = path.partition("?")
    if route == "/seen":
        entry = seen.get(query, {"count": 0, "headers": {}})
        return http.HTTPStatus.OK, [("Content-Type", "application/json")], json.dumps(entry).encode()
    entry = seen.setdefault(route, {"count": 0, "headers": {}})
    entry["count"] += 1
    entry["headers"] = {k.lower(): v for k, v in headers.raw_items()}
    if route == "/plain":
        return http.HTTPStatus.OK, [("Content-Type", "text/plain")], b"no websocket here\n"
    if route == "/refuse-once" and entry["count"] == 1:
        return http.HTTPStatus.SERVICE_UNAVAILABLE, [("Retry-After", "1")], b"busy\n"
    return None


async def handler(ws, path):
    if path.startswith("/reset-after-open"):
        ws.transport.abort()
        return
    async for message in ws:
        await ws.send(message)


async def serve(port_file, cert=None, key=None):
    context = None
    if cert:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
    server = await websockets.serve(handler, "127.0.0.1", 0, process_request=process_request, max_size=None,
                                    ssl=context, ping_interval=None)
    port = server.sockets[0].getsockname()[1]
    tmp = port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(port))
    os.rename(tmp, port_file)
    await asyncio.Future()


async def client(rebound_port, uri):
    out = {}
    sock = socket.create_connection(("127.0.0.1", rebound_port))
    try:
        async with websockets.connect(uri, sock=sock, max_size=None, open_timeout=20, ping_interval=None) as ws:
            out["status"] = 101
            out["attempts"] = ws.response_headers.get("Rebound-Attempts")
            out["via"] = ws.response_headers.get("Via")
            await ws.send("hello")
            out["text"] = await ws.recv()
            await ws.send(b"\x00\x01\x02\xff")
            out["binary"] = (await ws.recv()).hex()
            big = os.urandom(1 << 20)
            await ws.send(big)
            echoed = await ws.recv()
            out["big_ok"] = echoed == big
            out["big_len"] = len(echoed)
            await ws.close()
            out["close_code"] = ws.close_code
    except websockets.exceptions.InvalidStatusCode as e:
        out["status"] = e.status_code
        out["error_type"] = e.headers.get("Rebound-Error")
    except websockets.exceptions.ConnectionClosed as e:
        out["closed_early"] = e.code
    except Exception as e:  # the test prints it: any other failure is the test's finding
        out["error"] = repr(e)
    print(json.dumps(out), flush=True)


def main():
    mode = sys.argv[1]
    if mode == "server":
        asyncio.run(serve(*sys.argv[2:5]))
    elif mode == "client":
        asyncio.run(client(int(sys.argv[2]), sys.argv[3]))
    else:
        sys.exit("usage: ws_peer.py server PORT_FILE [CERT KEY] | client REBOUND_PORT URI")


if __name__ == "__main__":
    main()
