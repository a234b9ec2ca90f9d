#pragma once
/** Idle upstream connections of one worker thread, keyed by scheme://host:port (https for a
    TLS origin, so a plain and a TLS connection never stand in for each other).

    A worker's sessions run on its single-threaded io_context, so the pool needs no lock.
    Only connections that finished a whole exchange cleanly come back here: a timed-out,
    failed or cancelled Beast stream is unusable and is closed instead. */
#include "proxy/upstream/connection.hpp"

#include <chrono>
#include <deque>
#include <optional>
#include <string>
#include <unordered_map>

namespace rebound::upstream {

class pool {
 public:
  using clock = std::chrono::steady_clock;

  /// `recheck_after`: how long a connection may sit idle before take() checks it is alive.
  pool(std::size_t max_idle_per_key, std::chrono::milliseconds idle_timeout,
       std::chrono::milliseconds recheck_after = std::chrono::seconds(1))
      : max_idle_per_key_(max_idle_per_key), idle_timeout_(idle_timeout), recheck_after_(recheck_after) {}

  /** The most recently used live connection for `key`, if any. Connections idle for a
      second or more are checked first: one the peer has closed (or sent unsolicited bytes
      on) is dropped here, not handed out. */
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
  std::chrono::milliseconds recheck_after_;
  std::unordered_map<std::string, std::deque<idle>> idle_;
};

}  // namespace rebound::upstream
