#include "proxy/retry/latency_tracker.hpp"

#include <algorithm>
#include <cmath>

namespace rebound::retry {
namespace {

constexpr double first_bound_us = 100.0;  ///< bucket 0 holds everything up to 100 us
constexpr double per_doubling = 4.0;

}  // namespace

latency_tracker::latency_tracker(std::chrono::nanoseconds window)
    : slice_width_(std::max<std::chrono::nanoseconds>(window / slices, std::chrono::milliseconds(1))) {}

std::size_t latency_tracker::bucket_of(duration took) {
  auto const us = static_cast<double>(took.count());
  if (us <= first_bound_us) return 0;
  auto const b = static_cast<std::size_t>(std::ceil(std::log2(us / first_bound_us) * per_doubling));
  return std::min(b, bucket_count - 1);
}

latency_tracker::duration latency_tracker::upper_bound(std::size_t bucket) {
  return duration(static_cast<std::int64_t>(std::ceil(first_bound_us * std::exp2(static_cast<double>(bucket) / per_doubling))));
}

std::uint64_t latency_tracker::epoch_of(time_point now) const {
  return static_cast<std::uint64_t>(now.time_since_epoch() / slice_width_) + 1;
}

template <class F>
void latency_tracker::for_each_live_slice(std::uint64_t e, F&& f) const {
  for (auto const& shard : shards_)
    for (auto const& s : shard.ring) {
      auto const se = s.epoch.load(std::memory_order_acquire);
      if (se == 0 || se > e || e - se >= slices) continue;
      f(s);
    }
}

void latency_tracker::record(duration took, time_point now) {
  auto const e = epoch_of(now);
  auto& s = shards_[observe::this_thread_shard(shard_count)].ring[e % slices];
  auto seen = s.epoch.load(std::memory_order_acquire);
  if (seen != e) {
    if (seen > e) return;  // a sample from a slice already overwritten by a later one: too old to count
    // The first writer of a new epoch claims the slice and clears its old counts.
    if (s.epoch.compare_exchange_strong(seen, e, std::memory_order_acq_rel))
      for (auto& c : s.counts) c.store(0, std::memory_order_relaxed);
  }
  s.counts[bucket_of(took)].fetch_add(1, std::memory_order_relaxed);
}

std::uint64_t latency_tracker::samples(time_point now) const {
  auto const e = epoch_of(now);
  std::uint64_t n = 0;
  for_each_live_slice(e, [&n](const slice& s) {
    for (auto const& c : s.counts) n += c.load(std::memory_order_relaxed);
  });
  return n;
}

std::optional<latency_tracker::duration> latency_tracker::quantile(double q, time_point now) const {
  auto const e = epoch_of(now);
  std::array<std::uint64_t, bucket_count> sum{};
  std::uint64_t total = 0;
  for_each_live_slice(e, [&](const slice& s) {
    for (std::size_t b = 0; b < bucket_count; ++b) {
      auto const c = s.counts[b].load(std::memory_order_relaxed);
      sum[b] += c;
      total += c;
    }
  });
  if (total < min_samples) return std::nullopt;
  // The smallest bucket with at least q of the samples at or below it.
  auto const rank = static_cast<std::uint64_t>(std::ceil(q * static_cast<double>(total)));
  std::uint64_t seen = 0;
  for (std::size_t b = 0; b < bucket_count; ++b) {
    seen += sum[b];
    if (seen >= rank) return upper_bound(b);
  }
  return upper_bound(bucket_count - 1);
}

}  // namespace rebound::retry
