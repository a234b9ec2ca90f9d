#pragma once
/** rebound as an HTTP/2 client: one connection to an upstream carries many streams at once
    (h2c with prior knowledge, or TLS with ALPN `h2`). nghttp2 does the framing, HPACK, flow
    control and SETTINGS; a read loop of its own feeds it, and each exchange waits for its
    stream's end.

    A failure says whether the request can have been processed, which is what
    need to know: a stream refused (RST_STREAM REFUSED_STREAM) or above a GOAWAY's last
    stream id was never processed and is safe to send again on another connection (RFC 9113
    sections 6.8 and 8.7); a connection lost mid-stream is not known either way. */
#include "proxy/h2/body_pipe.hpp"
#include "proxy/h2/message.hpp"
#include "proxy/net.hpp"
#include "proxy/upstream/attempt.hpp"

#include <boost/asio/steady_timer.hpp>
#include <boost/system/result.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace rebound::h2 {

using clock = std::chrono::steady_clock;

enum class failure_kind {
  refused,          ///< never processed: REFUSED_STREAM, or above a GOAWAY's last stream id
  reset,            ///< the server reset the stream with another code
  connection_lost,  ///< the connection ended before the stream did
  timeout,          ///< the deadline passed (the stream was reset with CANCEL)
  protocol_error,   ///< the upstream broke HTTP/2, or answered with a malformed head
  too_large,        ///< the response body outgrew the limit given to `exchange`
};

struct failure {
  failure_kind kind = failure_kind::connection_lost;
  std::string message;
};

/// Only reached by calling value() on a failed result, which nothing on the data path does.
[[noreturn]] void throw_exception_from_error(const failure& f, const boost::source_location& loc);

using exchange_result = boost::system::result<message, failure>;
/// A streamed exchange's response head (a trailers-only answer has its pipe ended, empty).
using head_result = boost::system::result<fields, failure>;

class client_connection : public std::enable_shared_from_this<client_connection> {
 public:
  /** Takes an open connection (for TLS, one whose ALPN chose `h2`), sends the client
      preface and SETTINGS, and starts the read loop on the connection's executor. */
  static std::shared_ptr<client_connection> start(upstream::connection conn);
  ~client_connection();

  /** Sends `request` (head fields with pseudo-headers first, the body, trailers if any) on a
      new stream and waits for the whole response by `deadline`, its body bounded by
      `max_response_body`. Cancellation (a terminal cancel on the awaiting coroutine) resets
      the stream and returns `timeout`. */
  net::awaitable<exchange_result> exchange(const message& request, std::size_t max_response_body,
                                           clock::time_point deadline);

  /** Opens a stream whose request body flows from `request` as it arrives and whose response
      body flows into `response`, and waits by `deadline` for the response head. The stream
      then goes on by itself: it ends with its body (the pipe ends, or fails on a reset or a
      lost connection), or with a CANCEL when the `response` pipe is abandoned or the
      `request` pipe fails. Cancellation or the deadline before the head resets the stream
      and returns `timeout`. */
  net::awaitable<head_result> open_stream(const fields& head, std::shared_ptr<body_pipe> request,
                                          std::shared_ptr<body_pipe> response, clock::time_point deadline);

  /// Whether a new stream may start here: open, no GOAWAY seen, stream ids and concurrency left.
  bool can_take_stream() const;
  /// Streams in flight.
  std::size_t active_streams() const;
  /// How long it has had no stream in flight (zero while it has one).
  clock::duration idle_for(clock::time_point now) const;
  /// The connection has ended: nothing more goes on it.
  bool closed() const;
  /// The address it is connected to (upstream::connection::peer).
  net::ip::address peer() const;
  /// Sends GOAWAY and closes once the streams in flight end.
  void shut_down();

  struct impl;

 private:
  explicit client_connection(std::unique_ptr<impl> i);
  std::unique_ptr<impl> impl_;
};

/** The HTTP/2 connections of one worker per upstream (`destination::pool_key`): a new one
    is opened only when none can take another stream (all at the server's
    SETTINGS_MAX_CONCURRENT_STREAMS, or going away). Every open one is kept, so a burst past
    one connection's streams does not leave connections open that nothing will use again.
    While a connect to an upstream is under way, calls for it wait for that one instead of
    each opening their own (a burst before the first connect would open one per call).
    Used on its worker's thread only. */
class client_pool {
 public:
  /** The connection for `to`, opened (TCP, then TLS with ALPN `h2` for an https origin)
      when there is none that can take a stream. A failure is the connect's error type. As
      for HTTP/1.1 (upstream::addresses_to_avoid), a connection to an ejected address, or on a
      retry to one the call tried, is passed over while the name offers another: a new one is
      opened there, so a retry need not share the connection that just failed. */
  net::awaitable<boost::system::result<std::shared_ptr<client_connection>, retry::attempt_failure>> get(
      const upstream::destination& to, clock::time_point deadline);
  /// Shuts every connection down (a drain).
  void shut_down();
  /** Shuts down the connections that have had no stream for `idle_timeout`, as the HTTP/1.1
      pool closes its idle ones: otherwise each upstream a worker ever called keeps one open. */
  void sweep(clock::duration idle_timeout);

 private:
  /// A connect under way, and the timers of the calls waiting for it: each is cancelled (a
  /// waitable event) when the connect ends, whichever way; each expires at its call's deadline.
  struct pending_connect {
    std::vector<net::steady_timer*> waiters;
  };
  std::unordered_map<std::string, std::vector<std::shared_ptr<client_connection>>> conns_;
  std::unordered_map<std::string, std::shared_ptr<pending_connect>> connecting_;
};

}  // namespace rebound::h2
