#pragma once
/** A dependency's recent attempt latency, for `hedge: {after: p95}`: how long an attempt
    takes to bring back a response head, as a quantile over a rolling window.

    Shared by every worker without a lock, like rolling_count: a ring of `slices` time
    slices, each a fixed log-scale histogram of atomic counters (4 buckets per doubling from
    100 us to about 100 s, so a quantile is read to within 19%) and the epoch it counts. A
    record is two relaxed atomic adds; a slice that has fallen out of the window is cleared
    by the first writer that finds it stale. A record racing that clear may be lost: one
    sample of hundreds, which a quantile estimate does not notice. Each thread records into
    a ring of its own (observe/thread_shard.hpp), which reads add up: every answered attempt
    records, and workers sharing one ring bounced its counters' cache lines between cores.

    Pure with respect to time: every call takes `now`. */
#include "proxy/observe/thread_shard.hpp"

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>

namespace rebound::retry {

class latency_tracker {
 public:
  using time_point = std::chrono::steady_clock::time_point;
  using duration = std::chrono::microseconds;
  static constexpr std::size_t slices = 5;
  static constexpr std::size_t bucket_count = 80;
  /// Below this many samples in the window, quantile() has no answer.
  static constexpr std::uint64_t min_samples = 20;

  /// `window`: how far back samples count (cut into `slices` slices).
  explicit latency_tracker(std::chrono::nanoseconds window = std::chrono::seconds(10));

  void record(duration took, time_point now);
  /** The `q` quantile (0 < q < 1) of the samples in the window ending at `now`, as the upper
      bound of the bucket it falls in (never an underestimate by more than rounding); none
      while fewer than min_samples were recorded. */
  std::optional<duration> quantile(double q, time_point now) const;
  std::uint64_t samples(time_point now) const;

  /// The bucket of a latency, and a bucket's upper bound: exposed for tests.
  static std::size_t bucket_of(duration took);
  static duration upper_bound(std::size_t bucket);

 private:
  struct slice {
    std::atomic<std::uint64_t> epoch{0};  ///< which slice of time it counts, plus one (0: never used)
    std::array<std::atomic<std::uint32_t>, bucket_count> counts{};
  };
  /// Rings: as many as workers usually run; more workers share them.
  static constexpr std::size_t shard_count = 4;
  struct alignas(observe::cache_line) shard {
    std::array<slice, slices> ring{};
  };
  std::uint64_t epoch_of(time_point now) const;
  /// Calls `f` with each slice of every ring that counts for the window ending at epoch `e`.
  template <class F>
  void for_each_live_slice(std::uint64_t e, F&& f) const;

  std::chrono::nanoseconds slice_width_;
  std::array<shard, shard_count> shards_{};
};

}  // namespace rebound::retry
