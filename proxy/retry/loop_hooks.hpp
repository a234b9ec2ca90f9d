#pragma once
/** The retry loop's seams: what it asks of the dependency's shared state (the R-7 budget
    and the circuit breaker) and what it tells whoever counts attempts (metrics). Both have
    do-nothing defaults, so the loop runs the same with or without them. */
#include "proxy/retry/classify.hpp"

#include <chrono>
#include <string_view>

namespace rebound::retry {

using duration = std::chrono::milliseconds;

/// What a dependency's breaker says of a new request.
struct admission {
  bool allowed = true;
  duration retry_after{0};  ///< with !allowed: time until the breaker lets a probe through
};

/// Whether a retry may go, and when not, why: the error type the client gets when the
/// refused retry leaves it without a response, and the reason logged with `retry_suppressed`.
struct retry_permit {
  bool granted = true;
  error_type refusal = error_type::budget_exhausted;
  std::string_view why;
};

/** Per-dependency admission, shared by every worker. The loop calls `admit` once before the
    first attempt, `record` after every attempt, and `allow_retry` before it schedules a
    retry; a retry that `allow_retry` refuses is not sent. */
class dependency_gate {
 public:
  virtual ~dependency_gate() = default;
  virtual admission admit() { return {}; }
  virtual retry_permit allow_retry() { return {}; }
  /// `failed`: the outcome is one R-4 calls retryable (the failures a breaker counts).
  virtual void record(bool failed) { (void)failed; }
};

/// One finished attempt, as metrics see it.
struct attempt_report {
  unsigned attempt = 0;  ///< 1 for the first
  attempt_outcome outcome;
  std::chrono::microseconds took{0};  ///< from the connect to the response head, or to the failure
  /// Cancelled because another copy of a hedged request answered first (hedge.hpp): it has
  /// no outcome, and `took` is only how long it ran.
  bool cancelled = false;
};

/// How a request, or a handed-over task, ended: with a success (R-4's verdict on the answer
/// it got), a failure (an error, a failing answer, the retries spent), or its caller gone.
enum class call_end { success, failure, abandoned };
std::string_view to_string(call_end e);

/// Counts what the loop does; every call happens on the worker running the request.
class attempt_observer {
 public:
  virtual ~attempt_observer() = default;
  virtual void attempt_done(const attempt_report& r) { (void)r; }
  /** Once per request or task, when it ends, with the attempts it took in all (hedges
      included) and its route's context: what seed 003's retry rate, attempts to success and
      second-attempt success are computed from. */
  virtual void ended(unsigned attempts, call_end how, std::string_view context) {
    (void)attempts, (void)how, (void)context;
  }
  virtual void retry_scheduled(duration wait) { (void)wait; }
  virtual void exhausted() {}
  /// A retry not made because the layer below spoke (`layered`, `overloaded`; layers.hpp).
  virtual void declined(std::string_view reason) { (void)reason; }
  /// A hedge sent, once its fate is known: `won`, `lost` (cancelled) or `failed` (hedge.hpp).
  virtual void hedge(std::string_view outcome) { (void)outcome; }
  /// A hedge that was due but not sent: `budget_exhausted`, `circuit_open` or
  /// `concurrency_limited`.
  virtual void hedge_suppressed(std::string_view reason) { (void)reason; }
  /// A request the concurrency limit cut short: refused at once, or a retry not sent.
  virtual void limited() {}
};

/// The do-nothing gate and observer the loop uses when it is given none.
dependency_gate& open_gate();
attempt_observer& silent_observer();

}  // namespace rebound::retry
