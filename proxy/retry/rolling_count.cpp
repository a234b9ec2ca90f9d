#include "proxy/retry/rolling_count.hpp"

#include <algorithm>

namespace rebound::retry {
namespace {

// A bucket word: its epoch in the high 32 bits, its count in the low 32. Epochs count
// bucket widths since the steady clock's origin and wrap after 2^32 buckets, far beyond any
// process lifetime at widths of a millisecond or more.
constexpr std::uint64_t pack(std::uint64_t epoch, std::uint64_t count) { return (epoch << 32) | (count & 0xffffffffu); }
constexpr std::uint64_t epoch_part(std::uint64_t word) { return word >> 32; }
constexpr std::uint64_t count_part(std::uint64_t word) { return word & 0xffffffffu; }
constexpr std::uint64_t epoch_mask = 0xffffffffu;

}  // namespace

rolling_count::rolling_count(std::chrono::nanoseconds window)
    : bucket_width_(std::max<std::chrono::nanoseconds>(std::chrono::milliseconds(1), window / bucket_count)) {}

std::uint64_t rolling_count::epoch_of(time_point now) const {
  return static_cast<std::uint64_t>(now.time_since_epoch() / bucket_width_) & epoch_mask;
}

void rolling_count::add(time_point now) {
  auto const epoch = epoch_of(now);
  auto& slot = shards_[observe::this_thread_shard(shard_count)].ring[epoch % bucket_count];
  auto word = slot.load(std::memory_order_relaxed);
  for (;;) {
    // A bucket still holding an older epoch is stale: this event starts it afresh.
    auto const next = epoch_part(word) == epoch ? word + 1 : pack(epoch, 1);
    if (slot.compare_exchange_weak(word, next, std::memory_order_relaxed)) return;
  }
}

std::uint64_t rolling_count::in_window(time_point now) const {
  auto const epoch = epoch_of(now);
  std::uint64_t total = 0;
  for (auto const& s : shards_)
    for (auto const& slot : s.ring) {
      auto const word = slot.load(std::memory_order_relaxed);
      // Unsigned distance: a bucket from the future (another thread's newer `now`) or more
      // than a window old does not count.
      auto const age = (epoch - epoch_part(word)) & epoch_mask;
      if (age < bucket_count) total += count_part(word);
    }
  return total;
}

void rolling_count::clear() {
  for (auto& s : shards_)
    for (auto& slot : s.ring) slot.store(0, std::memory_order_relaxed);
}

}  // namespace rebound::retry
