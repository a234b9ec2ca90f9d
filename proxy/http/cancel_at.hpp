#pragma once
/** Cancels a socket's pending operations at a point in time and leaves the socket open,
    so rebound can still answer (408) after a deadline of its own passed. Beast's
    tcp_stream timeout closes the socket, which is right for an idle peer but leaves
    nothing to answer on.

    The timer's handler may already be queued when the guard goes away; it then finds the
    shared state disarmed and touches nothing. Single-threaded use (one worker). */
#include "proxy/net.hpp"

#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <memory>

namespace rebound::http {

class cancel_at {
 public:
  cancel_at(tcp::socket& socket, std::chrono::steady_clock::time_point when)
      : state_(std::make_shared<state>()), timer_(socket.get_executor(), when) {
    timer_.async_wait([st = state_, &socket](error_code ec) {
      if (ec || !st->armed) return;
      st->fired = true;
      error_code ignored;
      socket.cancel(ignored);
    });
  }
  ~cancel_at() {
    state_->armed = false;
    timer_.cancel();
  }
  cancel_at(const cancel_at&) = delete;
  cancel_at& operator=(const cancel_at&) = delete;

  /// Whether the deadline passed and the socket's operations were cancelled.
  bool fired() const { return state_->fired; }

 private:
  struct state {
    bool armed = true;
    bool fired = false;
  };
  std::shared_ptr<state> state_;
  net::steady_timer timer_;
};

}  // namespace rebound::http
