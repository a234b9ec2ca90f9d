#pragma once
/** Streams a message body from one connection to another through a fixed buffer, never
    holding the whole body (Beast's relay pattern, made asynchronous). Chunked input is
    re-framed by the serializer per the header fields the caller set. */
#include "proxy/net.hpp"
#include "proxy/upstream/connection.hpp"

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include "proxy/http/bounded_parser.hpp"
#include <boost/beast/http/serializer.hpp>

#include <chrono>
#include <cstdint>
#include <string_view>

namespace rebound::http {

namespace bhttp = boost::beast::http;

/** limits.body_timeout and min_body_rate: a request body gets `grace`, plus one second per
    `bytes_per_second` bytes received, in all. An idle timeout alone would let a body
    trickled at a byte every few seconds hold a connection forever. */
struct body_pace {
  std::chrono::steady_clock::time_point start;
  std::chrono::milliseconds grace;
  std::uint64_t bytes_per_second;

  /// When the body must have ended, given what has arrived so far.
  std::chrono::steady_clock::time_point deadline(std::uint64_t received) const {
    return start + grace + std::chrono::milliseconds(received / bytes_per_second * 1000);
  }
};

/// Which side failed, so the caller can answer the right party.
struct relay_result {
  error_code read_error;   ///< from the side being read
  error_code write_error;  ///< from the side being written
  bool ok() const { return !read_error && !write_error; }
};

/** Reads the rest of `p`'s message from `from` and writes it, header first if not yet sent,
    through `sr` to `to`. Each read and each write must progress within `idle`. `prefix` is
    body already read from `from`; it goes out first. */
net::awaitable<relay_result> relay_request_body(beast::tcp_stream& from, beast::flat_buffer& buffer, request_parser& p,
                                                upstream::connection& to,
                                                bhttp::request_serializer<bhttp::buffer_body>& sr,
                                                std::chrono::milliseconds idle, std::string_view prefix,
                                                const body_pace& pace);

/** Forwards an interim (1xx) response head to an HTTP/1.1 client, hop-by-hop fields
    removed: RFC 9110 section 15.2 has a proxy forward 1xx answers (103 Early Hints, 102)
    it did not ask for. */
net::awaitable<error_code> relay_interim(beast::tcp_stream& client, const bhttp::response_header<>& head,
                                         std::chrono::milliseconds idle);

net::awaitable<relay_result> relay_response_body(upstream::connection& from, beast::flat_buffer& buffer,
                                                 response_parser& p, beast::tcp_stream& to,
                                                 bhttp::response_serializer<bhttp::buffer_body>& sr,
                                                 std::chrono::milliseconds idle);

}  // namespace rebound::http
