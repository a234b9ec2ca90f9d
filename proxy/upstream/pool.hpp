#pragma once
/** Idle upstream connections of one worker thread, keyed by scheme://host:port (https for a
    TLS origin, so a plain and a TLS connection never stand in for each other).

    A worker's sessions run on its single-threaded io_context, so the pool needs no lock.
    Only connections that finished a whole exchange cleanly come back here: a timed-out,
    failed or cancelled Beast stream is unusable and is closed instead. */
#include "proxy/upstream/connection.hpp"

#include <chrono>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>

namespace rebound::upstream {

class pool {
 public:
  using clock = std::chrono::steady_clock;

  /// `now` is the clock idle times are measured with (tests pass their own).
  pool(std::size_t max_idle_per_key, std::chrono::milliseconds idle_timeout,
       std::function<clock::time_point()> now = &clock::now)
      : max_idle_per_key_(max_idle_per_key), idle_timeout_(idle_timeout), now_(std::move(now)) {}

  /** The most recently used live connection for `key`, if any. Every connection is
      checked first, however briefly it sat idle: one the peer has closed (or sent
      unsolicited bytes on) is dropped here, not handed out. An upstream that restarts
      closes its connections at once, and one with a short keep-alive timeout (Node 5 s,
      gunicorn 2 s, nginx configured at 1 s) within a second; either would otherwise cost
      a request that cannot be sent twice its answer. The check is one non-blocking recv. */
  std::optional<connection> take(const std::string& key);

  void put(const std::string& key, connection stream);

  /// Closes connections idle for longer than the idle timeout.
  void sweep();

  std::size_t idle_count() const;

 private:
  struct idle {
    connection stream;
    clock::time_point since;
  };
  std::size_t max_idle_per_key_;
  std::chrono::milliseconds idle_timeout_;
  std::function<clock::time_point()> now_;
  std::unordered_map<std::string, std::deque<idle>> idle_;
};

}  // namespace rebound::upstream
