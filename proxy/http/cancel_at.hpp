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
  cancel_at(tcp_socket& socket, std::chrono::steady_clock::time_point when)
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

/** The same cancellation for a connection whose deadline moves with every request, at the
    cost of one timer for the connection's life. Moving the deadline later touches nothing:
    the timer wakes at the earlier time, finds the new one and sleeps again. Only a deadline
    earlier than the pending wake-up re-arms it. A cancel_at per request and Beast's timer
    per read were four timer insertions and removals, two allocations and two handlers per
    keep-alive request (bench/README.md, "timers"). Single-threaded use (one worker). */
class connection_deadline {
 public:
  explicit connection_deadline(tcp_socket& socket);
  ~connection_deadline();
  connection_deadline(const connection_deadline&) = delete;
  connection_deadline& operator=(const connection_deadline&) = delete;

  /// Cancels the socket's operations at `when` unless moved again first.
  void arm(std::chrono::steady_clock::time_point when);
  /// No deadline until the next arm.
  void disarm() { state_->deadline = never; }
  /// Whether the deadline armed last passed and the socket's operations were cancelled.
  bool fired() const { return state_->fired; }

 private:
  static constexpr auto never = std::chrono::steady_clock::time_point::max();
  struct state {
    explicit state(tcp_socket& s) : socket(&s), timer(s.get_executor()) {}
    tcp_socket* socket;  ///< null once the owner is gone
    net::steady_timer timer;
    std::chrono::steady_clock::time_point deadline = never;
    std::chrono::steady_clock::time_point wake = never;  ///< when the pending wait ends
    bool waiting = false;
    bool fired = false;
  };
  static void sleep_until(const std::shared_ptr<state>& st, std::chrono::steady_clock::time_point t);
  std::shared_ptr<state> state_;
};

}  // namespace rebound::http
