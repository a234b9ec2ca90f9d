#pragma once
/** Forwarding one request to its upstream and streaming the answer back, and the answers
    rebound sends itself. Called by the client session once a request head is valid. */
#include "proxy/http/client_request.hpp"
#include "proxy/http/client_session.hpp"
#include "proxy/plan/dependency_route.hpp"
#include "proxy/wire/error_response.hpp"
#include "proxy/http/message_rewrite.hpp"
#include "proxy/http/relay.hpp"
#include "proxy/http/request_body.hpp"
#include "proxy/plan/request_target.hpp"
#include "proxy/retry/loop.hpp"
#include "proxy/upstream/attempt.hpp"

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include "proxy/wire/bounded_parser.hpp"

#include <optional>
#include <string_view>

namespace rebound::runtime {
class session_guard;
}

namespace rebound::http {

namespace bhttp = boost::beast::http;

/** Forwards the request whose head `parser` holds: through the retry loop when its body is
    none or kept in memory, streamed once otherwise. Returns whether the client connection
    may carry another request (false after errors that leave its stream in doubt). */
net::awaitable<bool> forward(const client_request& r, runtime::session_guard& guard);

/// destination_of (plan/dependency_route.hpp) for an HTTP/1.1 request: its own Authorization, if
/// it carries one, is kept and rebound's credential stays off it (SPEC 5).
upstream::destination destination_of(const plan::dependency_route& route, const plan::request_target& t,
                                     const std::string& pool_key, const request_message<bhttp::buffer_body>& req);

/** Streams an exchange's response (its head read, its body not) to the client, then pools the
    upstream connection when the exchange ended cleanly; returns whether the client
    connection may carry another request. `facts` name the request in the log of a body cut
    short; `attempts` and `gave_up` go in Rebound-Attempts and Rebound-Retried. An empty `key`:
    the connection is closed rather than pooled (one that is never taken from the pool). */
struct final_answer {
  const retry::request_facts& facts;
  client_side client;
  const std::string& key;  ///< the upstream pool's key; empty: close rather than pool
};
net::awaitable<bool> relay_final_response(const runtime::session_context& ctx, beast::tcp_stream& client,
                                          upstream::exchange& ex, const final_answer& a);

/// Writes rebound's own error answer; the result says whether the write succeeded.
net::awaitable<bool> send_error(beast::tcp_stream& client, const error_reply& e, bool keep_alive,
                                std::chrono::milliseconds idle);

}  // namespace rebound::http
