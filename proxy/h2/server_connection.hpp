#pragma once
/** rebound as an HTTP/2 server over cleartext TCP with prior knowledge (h2c, RFC 9113
    section 3.3): the side a gRPC channel that targets rebound directly talks to. nghttp2's
    C API does the framing, HPACK, flow control and SETTINGS; this file drives it from Asio.

    Each stream whose request has ended (END_STREAM) is handed to `request_handler` as a
    coroutine of its own on the connection's executor; many run at once on one connection.
    Its answer goes back as HEADERS, DATA and, when it has trailers, a trailing HEADERS. */
#include "proxy/h2/body_pipe.hpp"
#include "proxy/h2/message.hpp"
#include "proxy/net.hpp"

#include <boost/asio/cancellation_signal.hpp>
#include <boost/beast/core/flat_buffer.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>

namespace rebound::runtime {
class session_guard;
}

namespace rebound::h2 {

/// The client connection preface every h2c-with-prior-knowledge connection opens with.
inline constexpr std::string_view client_preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/** Whether `bytes` (the first bytes a client sent) begin the preface: `yes` once all 24
    bytes match, `maybe` while what arrived is a strict prefix of it, `no` otherwise. */
enum class preface_match { no, maybe, yes };
preface_match match_preface(std::string_view bytes);

struct server_limits {
  std::size_t max_request_body = 1 << 20;  ///< larger: the stream is answered 413
  std::uint32_t max_concurrent_streams = 100;
  std::size_t max_header_list = 64 * 1024;
  /// With no stream open and nothing read for this long the connection closes, after a GOAWAY;
  /// an answer the client takes no byte of for this long has its stream reset.
  std::chrono::milliseconds idle_timeout{60'000};
  /** What one connection may hold of request bodies held whole, over all its streams: it is
      the connection's receive window, and credit comes back only when such a body is let go
      (its stream ends), so a client cannot make rebound hold more however many streams it
      opens. At least max_request_body. */
  std::size_t connection_buffer = 8u << 20;
  /** What one connection may hold of answers held whole, over all its streams
      (answer_budget.hpp): past it new streams are refused and upstream credit is held back. */
  std::size_t answer_buffer = 4u << 20;
  /// A request held whole must arrive within body_timeout plus a second per min_body_rate
  /// bytes received (limits.body_timeout, min_body_rate): slower, it is answered 408.
  std::chrono::milliseconds body_timeout{30'000};
  std::uint64_t min_body_rate = 1024;
};

/** Answers one request. The handler runs with a cancellation slot bound: a client that
    resets the stream, or a connection that ends, cancels it with the terminal type. */
using request_handler = std::function<net::awaitable<message>(message request)>;

/** How a streamed call is answered. Valid while its handler runs. */
class call_responder {
 public:
  virtual ~call_responder() = default;
  /// Answers with a message held whole (a failure before the upstream answered).
  virtual void respond(message whole) = 0;
  /// Answers with `head`, then DATA from `body` as it arrives, then its trailers.
  virtual void respond(fields head, std::shared_ptr<body_pipe> body) = 0;
};

/** A request handed over as soon as its head arrives (a streaming gRPC call): its body
    comes through `body` while the handler runs. */
struct streamed_request {
  fields head;
  std::shared_ptr<body_pipe> body;
  call_responder* responder = nullptr;
};

/** Handles a streamed request. Its cancellation slot is emitted (terminal) when the stream
    closes, whether its answer went out whole or the client reset it: the handler's cue that
    the call is over. */
using stream_handler = std::function<net::awaitable<void>(streamed_request)>;

/** How one request is answered, as its head decided: `whole` once the request has ended, or
    `stream` as soon as its head arrived. One of the two is set. */
struct call_handler {
  request_handler whole;
  stream_handler stream;
};

/** What a connection does with each request. `at_head` reads the head once, as it arrives,
    may add to it what travels on, and says how the request is answered; what it decided
    travels in the handler it returns (a gRPC call is located and planned there, once). */
struct handlers {
  std::function<call_handler(fields& head)> at_head;
  /** How a refused call (content-type application/grpc) is answered, as gRPC clients read a
      refusal (grpc/status.hpp): a bare HTTP 413 or 431 is UNKNOWN to them, with no reason.
      Null, or any other request: the HTTP status alone. */
  std::function<message(stream_refusal why, std::string_view message)> refuse_call;
};

/// Handlers that answer every request whole with `h`.
handlers answer_whole(request_handler h);

/// What the process tells a connection, and is told by it. Null members are not used.
struct session_signals {
  const bool* draining = nullptr;        ///< a drain has begun: no new streams
  runtime::session_guard* guard = nullptr;  ///< told when the connection is idle (no stream open)
};

/** Serves `stream` as HTTP/2 until the client closes, the connection fails, it sits idle for
    `limits.idle_timeout`, or a drain (`*signals.draining`) has let the open streams finish
    (new streams are refused with a GOAWAY as soon as a drain is seen). `preread` holds the
    bytes already read from the socket (the preface at least). Returns once every handler it
    started has finished. */
net::awaitable<void> serve(beast::tcp_stream& stream, beast::flat_buffer& preread, const server_limits& limits,
                           handlers handler, session_signals signals);
/// The same, for a server that takes every request whole.
net::awaitable<void> serve(beast::tcp_stream& stream, beast::flat_buffer& preread, const server_limits& limits,
                           request_handler handler, session_signals signals);

}  // namespace rebound::h2
