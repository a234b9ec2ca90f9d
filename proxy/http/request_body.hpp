#pragma once
/** A client's request body as the doors that need it whole read it (the retry loop's kept
    body, the hand-over, the inbound gate), each read within limits.idle_timeout and the whole
    at the pace limits.body_timeout and min_body_rate set, and the answers rebound owes a
    client about its body: 100 Continue, 417, 408, 413, 400. */
#include "proxy/http/client_request.hpp"
#include "proxy/http/relay.hpp"
#include "proxy/wire/error_reply.hpp"

#include <chrono>
#include <optional>
#include <string>

namespace rebound::http {

/// RFC 9110 10.1.1: an HTTP/1.1 request that expects anything but 100-continue gets 417,
/// on every path (forwarded or handed over).
std::optional<error_reply> unmet_expectation(const request_message<bhttp::buffer_body>& req);

/// rebound's own 100 Continue, for a client that waits for one before it sends its body;
/// false when the client cannot take it.
net::awaitable<bool> send_continue(beast::tcp_stream& client, std::chrono::milliseconds idle);

/// How reading a body to keep it ended.
struct kept_body {
  std::optional<error_reply> problem;  ///< the client failed; status 0 = nobody left to answer
  bool overflow = false;               ///< a chunked body outgrew the limit: what was read must still go out
};

/** Reads the whole request body into `out`, so it can be sent again (every attempt, or a
    delivery later), each read within limits.idle_timeout and the whole at the pace of
    `pace_of`. A chunked body has no length to check in advance: reading stops once it
    passes `limit`. */
net::awaitable<kept_body> read_whole_body(const client_request& r, std::string& out, std::size_t limit);

/// The pace a request body starting now must keep (limits.body_timeout, min_body_rate).
body_pace pace_of(const config::config& cfg, std::chrono::steady_clock::time_point start);

/// rebound's answer to a request body that could not be read, or nullopt when the client
/// went away (nobody to answer).
std::optional<error_reply> body_read_refusal(const error_code& ec, const request_parser& parser);

/** What reading a body whole for a door that keeps it came to (`take_whole_body`): read, too
    large for the door's limit (its 413 is the door's to word), the client gone, or refused
    with rebound's answer to a body that could not be read (`problem`). */
struct whole_body {
  enum class end { read, too_large, client_gone, refused } how = end::read;
  std::optional<error_reply> problem;  ///< with `refused`
};
/** Reads the request body whole within `limit`: a declared length past it is refused before a
    byte is read, and a client that waits for 100 Continue gets it first. The one way the
    doors that keep a body whole (the hand-over, the inbound gate) read it. */
net::awaitable<whole_body> take_whole_body(const client_request& r, std::string& body, std::size_t limit);

}  // namespace rebound::http
