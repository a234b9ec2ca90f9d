#pragma once
/** Would we retry? The one decision after every attempt, for every path that retries (HTTP
    requests, CONNECT's connect, gRPC calls, hedged runs, async delivery), as a pure function:
    Envoy's `wouldRetry` beside the effectful step that asks it (step.hpp). It owns R-1 (both jitters), R-2
    (the count, and the DNS cap of R-4), R-3 (the deadline and the minimum time an attempt
    needs), R-4 (through the route's `retry_on`), R-5 (Retry-After, both forms), R-6 (whether
    the request may be repeated at all, decided by the caller), R-9's expiry check, and what
    a rebound below said of itself (one layer retries, layers.hpp).
    What it does not own are effects: the budget and breaker, logs, metrics (all in
    step.hpp), timers and a drain (loop.hpp). Time and randomness come in as values, so tests need neither clocks nor sleeps. */
#include "proxy/retry/policy.hpp"
#include "proxy/retry/backoff.hpp"
#include "proxy/retry/classify.hpp"

#include <chrono>
#include <optional>
#include <string_view>
#include <variant>

namespace rebound::retry {

/// What the layer that answered (another rebound) said of itself; see layers.hpp.
struct layer_signal {
  bool gave_up = false;     ///< it retried and gave up (`Rebound-Retried: exhausted`)
  bool overloaded = false;  ///< it refused the call to protect its dependency (`Rebound-Overloaded: 1`)
};

/// Everything the decision reads, all of it values.
struct attempt_facts {
  attempt_outcome outcome;                      ///< the status, or rebound's error type
  std::optional<std::string_view> retry_after;  ///< the response's Retry-After value, if it had one
  /// A gRPC answer's grpc-retry-pushback-ms, if it had one: R-5 for gRPC.
  std::optional<std::string_view> grpc_pushback;
  layer_signal below;         ///< what the answering layer said of itself
  unsigned attempts = 1;      ///< attempts made so far, this one included
  bool may_repeat = true;     ///< R-6 (and a kept body) allow sending it again
  duration previous_wait{0};  ///< the last wait (decorrelated jitter); 0 before the first retry
  std::chrono::steady_clock::time_point now;
  std::chrono::steady_clock::time_point deadline;  ///< R-3: the request's total_timeout
  std::chrono::system_clock::time_point wall_now;  ///< for Retry-After dates and credential expiry
  /// The `exp` of the request's own bearer JWT: no retry goes out once it has passed.
  std::optional<std::chrono::system_clock::time_point> credential_expires;
  double u = 0.0;  ///< a uniform draw in [0, 1) for the jitter
};

/// Retry after `wait`.
struct retry_in {
  duration wait{0};
  std::optional<duration> retry_after;  ///< what the upstream asked for, when it did (for the log)
};

enum class stop_reason {
  final,                        ///< R-4: the outcome is a success or must not be retried
  not_repeatable,               ///< R-6: the request may not be sent again
  exhausted,                    ///< R-2: max_retries spent (or R-4's DNS cap)
  retry_after_beyond_deadline,  ///< R-5
  deadline,                     ///< R-3: no time left for another attempt
  credential_expired,           ///< R-9: the request's own credential would be expired at the retry
  pushback_refused,             ///< a gRPC server's pushback said not to retry (negative or malformed)
  layered,                      ///< the layer below already retried and gave up (`retry_layered: false`)
  overloaded,                   ///< the layer below shed the call to protect its dependency: back off
};

struct stop {
  stop_reason reason = stop_reason::final;
  /// The error the client gets when no response is left to return (the deadline stops).
  std::optional<error_type> error;
  std::optional<duration> retry_after;
};

using decision = std::variant<retry_in, stop>;

/// No attempt starts with less time than this left: it could not finish.
inline constexpr duration min_attempt_time{50};

decision decide(const retry::policy& policy, const attempt_facts& facts);

std::string_view to_string(stop_reason r);

}  // namespace rebound::retry
