#pragma once
/** The circuit breaker of one dependency (SPEC 2, `circuit_breaker`), shared by every worker.

    closed -> open: at least `min_requests` attempts in the rolling `window` and at least
    `failure_ratio` of them failed; or the retry budget ran dry and `open_on_budget_exhausted`.
    open -> half_open: once `open_for` (jittered by up to +-10% so a fleet of sidecars does not
    probe in lockstep) has passed, at the next `admit`. half_open lets `half_open_probes`
    requests through; when that many attempts succeeded it closes, one failure opens it again.
    Probes that never report (their client left before the attempt) would hold it half-open
    for ever, so after another `open_for` without a verdict it lets a new round through.

    Pure with respect to time and chance: every call takes `now`, and opening takes a uniform
    draw `u` in [0, 1) for the jitter. No mutex: the state and the time it ends or began are
    one atomic word, and a transition is made by the one caller whose compare-exchange on it
    wins; that caller gets it reported so it can log it. */
#include "proxy/retry/policy.hpp"
#include "proxy/retry/rolling_count.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string_view>

namespace rebound::retry {

enum class breaker_state : std::uint8_t { closed = 0, half_open = 1, open = 2 };  ///< the metric's values (SPEC 8)

std::string_view to_string(breaker_state s);

/// A state change, for the caller to log: from, to and why ("failure_ratio", "budget_exhausted",
/// "open_for elapsed", "probe failed", "probes succeeded").
struct breaker_transition {
  breaker_state from;
  breaker_state to;
  std::string_view reason;
};

class circuit_breaker {
 public:
  using time_point = std::chrono::steady_clock::time_point;
  using duration = std::chrono::milliseconds;

  /// `created` starts the first state's time (in_state_ms of a breaker that never moved).
  explicit circuit_breaker(const retry::breaker_policy& p, time_point created = std::chrono::steady_clock::now());
  const retry::breaker_policy& policy() const { return policy_; }

  struct decision {
    bool allowed = true;
    duration retry_after{0};                       ///< with !allowed: time until a probe may go
    std::optional<breaker_transition> transition;  ///< open -> half_open happened in this call
  };
  /** May a new request go? Closed: yes. Open: no until open_for has passed, then the breaker
      goes half-open and this request is a probe. Half-open: yes while probes are left. With
      mode `signal` or `off` the answer is always yes (state is still tracked for `signal`). */
  decision admit(time_point now);

  /// May a retry go? Only while closed (mode enforce); always with signal/off.
  bool allow_retry() const;

  /// Records one finished attempt. `failed`: R-4 calls its outcome a transient failure.
  std::optional<breaker_transition> record(bool failed, time_point now, double u);

  /// The budget ran dry: opens a closed breaker when open_on_budget_exhausted is set.
  std::optional<breaker_transition> budget_exhausted(time_point now, double u);

  breaker_state state() const;
  /// When the current state began (for GET /dependencies).
  time_point since() const;

 private:
  /// The state word: the state in the low 2 bits, above them a time in nanoseconds of the
  /// steady clock: when an open breaker may probe, when a half-open round began.
  /// From the state word `seen` (its state is the one left) to `to`, unless another thread
  /// moved it first.
  std::optional<breaker_transition> open_from(std::uint64_t seen, std::string_view reason, time_point now, double u);
  std::optional<breaker_transition> move(std::uint64_t seen, breaker_state to, time_point stamp, time_point now,
                                         std::string_view reason);
  void start_round();

  retry::breaker_policy policy_;
  std::atomic<std::uint64_t> word_;
  std::atomic<std::int64_t> since_ns_;        ///< when the state began, for display only
  std::atomic<std::int64_t> probes_left_{0};  ///< half-open admissions left in this round
  std::atomic<std::int64_t> probe_successes_{0};
  rolling_count attempts_;
  rolling_count failures_;
};

}  // namespace rebound::retry
