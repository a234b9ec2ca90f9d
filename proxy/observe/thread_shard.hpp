#pragma once
/** Which of a structure's per-thread shards the calling thread writes. State every worker
    updates on every request (metrics, R-7's budget window, the breaker's window, the latency
    tracker) is kept in shards on cache lines of their own: one shared counter that two
    workers increment bounces its line between their cores on every request. Readers add
    the shards up; they read far less often than writers write. */
#include <atomic>
#include <cstddef>

namespace rebound::observe {

/// The shard the calling thread writes, given out round robin on the thread's first call:
/// workers are made one after another at start-up, so each gets a shard of its own while
/// there are as many shards as workers; beyond that, threads share.
inline std::size_t this_thread_shard(std::size_t count) {
  static std::atomic<std::size_t> next{0};
  thread_local std::size_t const mine = next.fetch_add(1, std::memory_order_relaxed);
  return mine % count;
}

/// A cache line, for aligning shards (std::hardware_destructive_interference_size warns in GCC 12).
inline constexpr std::size_t cache_line = 64;

}  // namespace rebound::observe
