#pragma once
/** One worker's share of a dependency's concurrency limit (issue 51): the pure limit
    (concurrency_limit.hpp) with the clock, the random draw for its probes, and a slot that
    gives itself back. Each worker has its own lane, so taking a slot writes nothing another
    core reads; the mutex is only ever contended by a scrape reading the lane. */
#include "proxy/retry/attempt_failure.hpp"
#include "proxy/retry/concurrency_limit.hpp"

#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace rebound::retry {

class alignas(64) concurrency_lane {
 public:
  concurrency_lane(const retry::concurrency_policy& p, unsigned shares, std::uint64_t seed)
      : limit_(p, shares, concurrency_limit::clock::now()), draws_(seed) {}

  /// An attempt's place in the lane: given back when it is released or destroyed.
  class slot {
   public:
    slot() = default;
    slot(concurrency_lane* lane, concurrency_limit::ticket t) : lane_(lane), ticket_(t) {}
    slot(slot&& o) noexcept : lane_(std::exchange(o.lane_, nullptr)), ticket_(o.ticket_) {}
    slot& operator=(slot&& o) noexcept {
      if (this != &o) {
        release(false);
        lane_ = std::exchange(o.lane_, nullptr);
        ticket_ = o.ticket_;
      }
      return *this;
    }
    slot(const slot&) = delete;
    slot& operator=(const slot&) = delete;
    ~slot() { release(false); }
    /// `latency`: the attempt's time says how loaded the dependency is (concurrency_limit::release).
    void release(bool latency) {
      if (auto* l = std::exchange(lane_, nullptr)) l->give_back(ticket_, latency);
    }
    bool held() const { return lane_ != nullptr; }

   private:
    concurrency_lane* lane_ = nullptr;
    concurrency_limit::ticket ticket_{};
  };

  /// A slot, or an empty one when the lane is full.
  slot take() {
    std::lock_guard lock(mutex_);
    if (auto t = limit_.try_acquire(concurrency_limit::clock::now())) return slot(this, *t);
    return {};
  }
  bool has_room() const {
    std::lock_guard lock(mutex_);
    return limit_.has_room();
  }

  struct reading {
    unsigned limit = 0;
    unsigned in_flight = 0;
    std::optional<concurrency_limit::clock::duration> min_rtt;
    bool probing = false;
  };
  reading read() const {
    std::lock_guard lock(mutex_);
    return {limit_.limit(), limit_.in_flight(), limit_.min_rtt(), limit_.probing()};
  }

 private:
  void give_back(const concurrency_limit::ticket& t, bool latency) {
    std::lock_guard lock(mutex_);
    // splitmix64: the draw that jitters the next probe, without a shared random source.
    std::uint64_t z = (draws_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    limit_.release(t, concurrency_limit::clock::now(), latency, static_cast<double>(z >> 11) * 0x1.0p-53);
  }

  mutable std::mutex mutex_;
  concurrency_limit limit_;
  std::uint64_t draws_;
};

/** What a request the limit had no slot for ends with (503 concurrency_limited): before any
    attempt (`attempts_before` 0), or in place of a retry. */
inline attempt_failure limited_failure(std::string_view dependency, unsigned attempts_before) {
  return {error_type::concurrency_limited,
          std::string(dependency) + " has as many attempts in flight as its concurrency limit allows" +
              (attempts_before > 0 ? "; no room for the retry" : ""),
          attempts_before > 0};
}

}  // namespace rebound::retry
