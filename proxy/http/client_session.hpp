#pragma once
/** One client connection: read requests, validate them, and forward each (or open a
    CONNECT tunnel), until the client or a drain ends the connection. */
#include "proxy/http/session_context.hpp"
#include "proxy/net.hpp"

namespace rebound::http {

net::awaitable<void> run_client_session(session_context ctx, tcp::socket socket);

/// Answers a connection over limits.max_connections with 503 `overloaded` and closes it.
net::awaitable<void> refuse_connection(tcp::socket socket);

/** Half-closes, then reads and drops what the client still sends for a moment before
    closing: closing with unread bytes makes the kernel send a reset, which can destroy an
    error answer the client has not read yet (nginx's lingering_close). Every listener that
    answers before a request's end closes this way. */
net::awaitable<void> lingering_close(beast::tcp_stream& client);

}  // namespace rebound::http
