#pragma once
/** Streams a message body from one connection to another through a fixed buffer, never
    holding the whole body (Beast's relay pattern, made asynchronous). Chunked input is
    re-framed per the header fields the caller set. */
#include "proxy/net.hpp"
#include "proxy/runtime/relay_buffers.hpp"
#include "proxy/upstream/attempt.hpp"
#include "proxy/upstream/connection.hpp"

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/optional/optional.hpp>
#include "proxy/wire/bounded_parser.hpp"

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

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

/// Where a body is read from: the connection, what was read past the head, the parser.
template <class Stream, class Parser>
struct body_from {
  Stream& stream;
  beast::flat_buffer& buffer;
  Parser& parser;
};
using request_body_from = body_from<beast::tcp_stream, request_parser>;
using response_body_from = body_from<upstream::connection, response_parser>;

/** Gives a buffer that a body is read through a relay buffer's room (16 KiB) first: Beast
    sizes each read by the buffer's free capacity, so a client's 4 KiB head buffer took a
    64 KiB body in sixteen reads, and a fresh buffer reads 512 bytes at a time. Not when the
    rest of the body (`left`, when its length is known) is in the buffer already, as a small
    message's is once its head was read: growing it would be an allocation and a copy for
    nothing. The session gives the room back before it waits for the next request. */
void make_room_for_body(beast::flat_buffer& buffer, const boost::optional<std::uint64_t>& left);

/// How a relay runs: each read and each write must progress within `idle`; a request body
/// also keeps to `pace`. Buffers come from `buffers` (null: the heap).
struct relay_pacing {
  std::chrono::milliseconds idle;
  runtime::relay_buffers* buffers = nullptr;
  const body_pace* pace = nullptr;
};

/** Reads the rest of `from`'s message and writes it to `to`, after `head` (the serialized
    head, wire_head.hpp; empty when it went out already), framed as the fields of the
    parser's message say (chunked or not). `prefix` is body already read from the client;
    it goes out first. A body of known length that goes out as it came is written from the
    buffer it was read into, with no relay buffer and no copy, and leaves its parser
    mid-body: a result that is ok() says the body went out whole. */
net::awaitable<relay_result> relay_request_body(request_body_from from, upstream::connection& to, std::string_view head,
                                                std::string_view prefix, const relay_pacing& how);

/** Forwards an interim (1xx) response head to an HTTP/1.1 client, hop-by-hop fields
    removed: RFC 9110 section 15.2 has a proxy forward 1xx answers (103 Early Hints, 102)
    it did not ask for. */
net::awaitable<error_code> relay_interim(beast::tcp_stream& client, response_parser& head,
                                         std::chrono::milliseconds idle);

/// An exchange's interim answers, passed on to an HTTP/1.1 client by relay_interim.
class interim_to_client final : public upstream::interim_listener {
 public:
  interim_to_client(beast::tcp_stream& client, std::chrono::milliseconds idle) : client_(client), idle_(idle) {}
  net::awaitable<error_code> interim(response_parser& head) override {
    return relay_interim(client_, head, idle_);
  }

 private:
  beast::tcp_stream& client_;
  std::chrono::milliseconds idle_;
};

/// The same for an upstream's response body, to the client.
net::awaitable<relay_result> relay_response_body(response_body_from from, beast::tcp_stream& to, std::string_view head,
                                                 const relay_pacing& how);

}  // namespace rebound::http
