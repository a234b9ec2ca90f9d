#pragma once
/** The policy a request runs under (SPEC 2's policy keys), and each of its parts: R-1's
    backoff, R-2's context and retries, R-3's total time, R-4's retry_on, R-6's idempotency,
    R-7's budget and circuit breaker, and rebound's own concurrency limit, outlier ejection and
    hedging. Plain data, resolved once when the config loads (config/load_policy.cpp: route
    over dependency over defaults over the built-ins of the context) and then only read. The
    rules that use them live beside them in retry/; config/ composes them into dependencies
    and routes. */
#include "proxy/retry/classify.hpp"

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rebound::retry {

using duration = std::chrono::milliseconds;

/// R-2's contexts. `grpc` is a gRPC unary call: R-2's own row, R-3's synchronous cap.
enum class context_kind { sync, async, webhook, batch, grpc };
/// Whether a call of this context is handed over (stored, answered 202, delivered later).
inline bool hands_over_calls(context_kind c) {
  return c == context_kind::async || c == context_kind::webhook || c == context_kind::batch;
}
enum class jitter_kind { full, decorrelated };

struct backoff_policy {
  duration base = std::chrono::seconds(1);  ///< R-1 default
  duration cap = std::chrono::seconds(30);  ///< R-1 default
  jitter_kind jitter = jitter_kind::full;
};

struct idempotency_policy {
  std::string header = "Idempotency-Key";
  bool inject = true;  ///< POST/PATCH without a key get a fresh UUIDv4 (R-6)
};

/// retries per dependency at most `ratio` of original requests over `window`, plus
/// `min_retries` per window so a quiet dependency's rare failures are still retried.
struct budget_policy {
  double ratio = 0.2;
  duration window = std::chrono::seconds(30);
  unsigned min_retries = 10;
  bool operator==(const budget_policy&) const = default;
};

enum class breaker_mode { enforce, signal, off };

struct breaker_policy {
  breaker_mode mode = breaker_mode::enforce;
  double failure_ratio = 0.5;
  unsigned min_requests = 20;
  duration window = std::chrono::seconds(10);
  bool open_on_budget_exhausted = true;
  duration open_for = std::chrono::seconds(30);
  unsigned half_open_probes = 3;
  bool operator==(const breaker_policy&) const = default;
};

enum class concurrency_mode { off, fixed, adaptive };

/** `concurrency:` (issue 51): how many attempts may be in flight to the dependency at once.
    `fixed` holds `limit`; `adaptive` moves the limit with the latency the dependency gives
    (retry/concurrency_limit.hpp: the gradient algorithm). The numbers are the process's: each
    worker holds its share (rounded up to at least 1), so no request writes a line another
    core reads. Tracked per dependency, like the breaker. */
struct concurrency_policy {
  concurrency_mode mode = concurrency_mode::off;
  unsigned limit = 0;      ///< fixed: the limit; adaptive: ignored
  unsigned min_limit = 3;  ///< adaptive: never below, and what the limit drops to while the minimum RTT is re-measured
  unsigned max_limit = 1000;
  /// adaptive: latency up to min RTT x (1 + tolerance) is taken as no queueing (Envoy's buffer)
  double tolerance = 0.25;
  /// adaptive: how often the minimum RTT is re-measured (jittered by up to 15%)
  duration probe_interval = std::chrono::seconds(60);
  bool enabled() const { return mode != concurrency_mode::off; }
  bool operator==(const concurrency_policy&) const = default;
};

/** `outlier_detection:` (issue 50): passive ejection of one address of a dependency's name.
    An address whose attempts fail `consecutive_failures` times in a row (a connect failure, a
    reset or timeout before the answer, a 5xx) is passed over for `base_ejection` x the times
    it was ejected, at most `max_ejection`; never more than `max_ejected_share` of the name's
    addresses at once, so a name with one address is never ejected. Tracked per dependency,
    beside the breaker, which it does not replace: an ejected address is not an open circuit. */
struct outlier_policy {
  bool enabled = true;
  unsigned consecutive_failures = 5;
  duration base_ejection = std::chrono::seconds(30);
  duration max_ejection = std::chrono::seconds(300);
  double max_ejected_share = 0.5;
  bool operator==(const outlier_policy&) const = default;
};

/** `hedge:` (issue 22): a second copy of an idempotent request goes out when the first has
    not answered within `after`; the first good answer wins and the rest are cancelled.
    Hedges are attempts: they count against max_retries and spend the R-7 budget. */
struct hedge_policy {
  unsigned max = 0;        ///< hedges per attempt, 1..3; 0 = off (the default)
  bool after_p95 = false;  ///< the delay is the dependency's observed p95 attempt latency
  duration after{0};       ///< the fixed delay, when !after_p95
  bool enabled() const { return max > 0; }
  bool operator==(const hedge_policy&) const = default;
};

/** The resolved per-request policy: dependency over defaults over the built-ins of its
    context. Computed once when the config loads. */
struct policy {
  context_kind context = context_kind::sync;
  unsigned max_retries = 3;
  backoff_policy backoff;
  /// The waits before retries 1, 2, ... (R-3's webhook table, or `schedule:`), with jitter
  /// over each step (retry/backoff.hpp); empty: the R-1 backoff above spaces the retries.
  std::vector<duration> schedule;
  duration total_timeout = std::chrono::seconds(30);
  duration attempt_timeout = std::chrono::seconds(10);
  retry::retry_on retry_on = retry::retry_on::r4_default();
  std::uint64_t max_retry_body = 1 << 20;
  idempotency_policy idempotency;
  std::string approval;  ///< R-2: recorded approval for max_retries above the range
  /// what a handed-over call's retries give up on is dead-lettered; `dead_letter: off`
  /// keeps a route from handing calls over at all (check refuses it on an async context).
  bool dead_letter = true;
  /** gRPC calls of this route are streaming RPCs (the wire does not say which are): relayed
      message by message as they arrive in both directions, retried only before the upstream
      has answered, never after its first byte reached the client. */
  bool grpc_streaming = false;
  /** Whether an answer from a layer below that already retried and gave up (another
      rebound's `Rebound-Retried: exhausted`) is retried again here. Off by default: retries
      at every layer of a call chain multiply, (1 + max_retries)^layers at the bottom. */
  bool retry_layered = false;
  hedge_policy hedge;  ///< off unless written (issue 22)
  /** `upgrades: [websocket]` (the default): a WebSocket handshake is relayed and, after the
      upstream's 101, the connection becomes a tunnel; `upgrades: []` answers it 403. */
  bool websocket_upgrades = true;
  budget_policy budget;              ///< tracked per dependency
  breaker_policy circuit_breaker;    ///< tracked per dependency
  concurrency_policy concurrency;    ///< tracked per dependency; off unless written
  outlier_policy outlier_detection;  ///< tracked per dependency, per address of its name
};

/** R-6's methods idempotent by themselves: GET, HEAD, OPTIONS, PUT, DELETE. They are retried
    without a key and are the only ones a hedge may copy; the one list both read. */
bool idempotent_method(std::string_view method);

/// R-2's default retries and R-3's total duration for a context.
unsigned builtin_max_retries(context_kind c);
duration builtin_total_timeout(context_kind c);
/// R-3's webhook table (1s, 5s, 30s, 2m, 15m, 1h, 4h after an immediate first attempt) for
/// webhook; empty for the other contexts, whose retries follow the R-1 backoff.
std::vector<duration> builtin_schedule(context_kind c);
/// R-2's allowed range of max_retries for a context.
struct retry_range {
  unsigned low, high;
};
retry_range allowed_retries(context_kind c);
/// R-3's upper bound on total_timeout for a context.
duration max_total_timeout(context_kind c);

/// The YAML spelling of an enum value.
std::string_view to_string(context_kind c);
std::string_view to_string(breaker_mode m);
std::string_view to_string(concurrency_mode m);

/** What the per-dependency guards are made from (dependency_guard.hpp): each configured
    dependency's name and resolved policy, the policy an unknown host gets, and how many
    unknown hosts get a guard of their own before the rest share one. */
struct dependency_policies {
  std::vector<std::pair<std::string, policy>> named;
  policy defaults;
  std::size_t max_unknown_hosts = 100;
};

}  // namespace rebound::retry
