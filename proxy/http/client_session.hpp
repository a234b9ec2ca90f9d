#pragma once
/** One client connection: read requests, validate them, and forward each (or open a
    CONNECT tunnel), until the client or a drain ends the connection. */
#include "proxy/runtime/session_context.hpp"
#include "proxy/net.hpp"

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>

namespace rebound::runtime {
class session_guard;
}

namespace rebound::http {

struct client_request;

/** The ways in above the HTTP/1.1 session, which app/ plugs in: they are built on http/, so
    http/ knows them only as these hooks. Null: not offered on this listener. */
struct session_doors {
  /// Serves the connection as HTTP/2 when its first bytes are HTTP/2's preface (gRPC,
  /// grpc/serve.hpp): true when it did, and the connection is over.
  net::awaitable<bool> (*http2)(runtime::session_context ctx, beast::tcp_stream& client, beast::flat_buffer& buffer,
                                runtime::session_guard& guard) = nullptr;
  /// Answers a request of the inbound listener: through the idempotency gate where its route
  /// asks for one (inbound/serve.hpp), else forwarded. False: the connection ends.
  net::awaitable<bool> (*inbound)(const client_request& request, runtime::session_guard& guard) = nullptr;
};

/** Takes an accepted client connection. Until its first bytes arrive, and between requests,
    it waits parked: its socket, its idle deadline and a small record, with no coroutine and
    no read buffer. A session coroutine serves it while requests keep coming. */
void serve_client(runtime::session_context ctx, session_doors doors, tcp_socket socket);

/// Answers a connection over limits.max_connections with 503 `overloaded` and closes it.
net::awaitable<void> refuse_connection(tcp_socket socket);

/** Half-closes, then reads and drops what the client still sends for a moment before
    closing: closing with unread bytes makes the kernel send a reset, which can destroy an
    error answer the client has not read yet (nginx's lingering_close). Every listener that
    answers before a request's end closes this way. */
net::awaitable<void> lingering_close(beast::tcp_stream& client);

}  // namespace rebound::http
