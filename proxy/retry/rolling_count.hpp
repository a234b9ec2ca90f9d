#pragma once
/** A count of events over a rolling window, shared by every worker without a lock: the
    retry budget counts originals and retries with it, the circuit breaker attempts and
    failures.

    The window is a ring of time buckets, not a list of timestamps: memory is fixed and old
    counts expire by being overwritten. Each bucket is one atomic word holding its epoch
    (which slice of time it counts) and its count, so adding is a compare-exchange. Each
    thread adds to a ring of its own (observe/thread_shard.hpp) and a read adds the rings up:
    every request of every worker adds to its dependency's counts, and one shared ring
    bounced its cache line between the workers' cores on each.

    Pure with respect to time: every call takes `now`. */
#include "proxy/observe/thread_shard.hpp"

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>

namespace rebound::retry {

class rolling_count {
 public:
  using time_point = std::chrono::steady_clock::time_point;
  static constexpr std::size_t bucket_count = 10;

  /// `window` is cut into bucket_count buckets of at least a millisecond each.
  explicit rolling_count(std::chrono::nanoseconds window);

  void add(time_point now);
  /// Events in the window ending at `now`.
  std::uint64_t in_window(time_point now) const;
  /** Forgets every count: a breaker that closes must not reopen on the failures that opened
      it. An add racing with it may survive or be lost; either is one event. */
  void clear();

 private:
  std::uint64_t epoch_of(time_point now) const;

  /// Rings: as many as workers usually run; more workers share them.
  static constexpr std::size_t shard_count = 4;
  struct alignas(observe::cache_line) shard {
    std::array<std::atomic<std::uint64_t>, bucket_count> ring{};
  };

  std::chrono::nanoseconds bucket_width_;
  std::array<shard, shard_count> shards_{};
};

}  // namespace rebound::retry
