#pragma once
/** The proxy port's HTTP/2 door: a client that opens with HTTP/2's preface (h2c with prior
    knowledge: a gRPC channel that targets rebound) is served as HTTP/2, each call through
    answer_call, or relay_call when its route says it streams. The HTTP/1.1 session calls it
    as its `http2` door (http/client_session.hpp), which app/ plugs in. */
#include "proxy/runtime/session_context.hpp"
#include "proxy/net.hpp"

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>

namespace rebound::runtime {
class session_guard;
}

namespace rebound::grpc {

/** Serves `client` as HTTP/2 when the bytes it sent first (in `buffer`) are the preface,
    and returns true once the connection is over; false when they are not (they are then
    parsed as HTTP/1.1). A first read shorter than the preface that still matches it is read
    on until it decides, within limits.head_timeout, as for an HTTP/1.1 head: a preface sent
    a byte at a time must not hold the connection forever. */
net::awaitable<bool> serve_if_http2(runtime::session_context ctx, beast::tcp_stream& client, beast::flat_buffer& buffer,
                                    runtime::session_guard& guard);

}  // namespace rebound::grpc
