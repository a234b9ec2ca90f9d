#pragma once
/** How many attempts may be in flight to one dependency from one worker (issue 51): a fixed
    number, or one that follows the latency the dependency gives, so that load is shed before
    the dependency queues everything it gets (Little's law: past its capacity, more requests
    in flight only add waiting).

    The adaptive limit is Envoy's gradient controller (adaptive_concurrency filter), the
    model Netflix's concurrency-limits also follow:
    - the minimum RTT is measured at low concurrency: the limit drops to min_limit until
      `probe_samples` attempts started under it have answered, and the median of those is the
      minimum RTT; then the limit goes back to where it was. This happens at start and every
      probe_interval, stretched by up to 15% at random so that a fleet does not probe at once;
    - every `window`, the median latency of the attempts that ended in it (the sample RTT)
      moves the limit: gradient = min RTT x (1 + tolerance) / sample RTT, clamped to
      [0.5, 2]; limit = limit x gradient + sqrt(limit x gradient) (headroom for bursts),
      clamped to [min_limit, max_limit].
    Pure: the caller passes the time and the random draws, so tests step through it. */
#include "proxy/retry/policy.hpp"
#include "proxy/retry/error_type.hpp"

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>

namespace rebound::retry {

/** Whether an attempt that ended with `failure` (none: a head came back) says how loaded the
    dependency is, as the limit samples it: a head, or a timeout waiting for one. A refused
    connection answers fast whatever the load. */
inline bool measures_load(std::optional<error_type> failure) {
  return !failure || *failure == error_type::attempt_timeout;
}

class concurrency_limit {
 public:
  using clock = std::chrono::steady_clock;
  static constexpr auto window = std::chrono::milliseconds(100);
  static constexpr unsigned probe_samples = 25;
  static constexpr double probe_jitter = 0.15;

  /// One worker's share of `p`: its limits are the process's divided by `shares` (at least 1).
  concurrency_limit(const retry::concurrency_policy& p, unsigned shares, clock::time_point now);

  /// An attempt in flight: when it started, and under which probe it did.
  struct ticket {
    clock::time_point start;
    std::uint32_t probe = 0;  ///< the probe it started under; 0: none
  };
  /// A slot for one attempt, or nothing when `limit()` attempts are in flight.
  std::optional<ticket> try_acquire(clock::time_point now);
  /// Whether try_acquire would give a slot now (a retry asks before it is scheduled).
  bool has_room() const { return in_flight_ < limit(); }
  /** The attempt of `t` ended. `latency`: whether its time says how loaded the dependency is
      (it brought back a head, or timed out); a refused connection or a cancelled hedge does
      not. `draw` in [0, 1): the jitter of the next probe, used when a probe ends. */
  void release(const ticket& t, clock::time_point now, bool latency, double draw);

  unsigned limit() const;
  unsigned in_flight() const { return in_flight_; }
  std::optional<clock::duration> min_rtt() const { return min_rtt_; }
  bool probing() const { return probe_ != 0; }
  bool adaptive() const { return mode_ == retry::concurrency_mode::adaptive; }

 private:
  /// A bounded set of latencies; the median of what it holds (the first `capacity` only).
  struct samples {
    static constexpr std::size_t capacity = 256;
    std::array<clock::duration, capacity> values{};
    std::size_t count = 0;
    void add(clock::duration d) {
      if (count < capacity) values[count++] = d;
    }
    clock::duration median();
  };
  void start_probe(clock::time_point now);
  void end_window(clock::time_point now);

  retry::concurrency_mode mode_;
  double min_, max_;  ///< this worker's share of min_limit / max_limit
  double tolerance_;
  clock::duration probe_interval_;
  double limit_;
  unsigned in_flight_ = 0;
  std::optional<clock::duration> min_rtt_;
  std::uint32_t probe_ = 0;       ///< the probe under way, 0: none
  std::uint32_t probes_ = 0;      ///< probes started so far (names the next one)
  double limit_before_probe_ = 0;
  clock::time_point next_probe_;
  clock::time_point window_end_;
  samples probe_set_;
  samples window_set_;
};

}  // namespace rebound::retry
