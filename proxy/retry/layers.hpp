#pragma once
/** One layer retries (issue 22). When rebound sidecars call each other, each one retrying
    multiplies the attempts: three layers of `max_retries: 3` put (1 + 3)^3 = 64 calls on the
    bottom dependency. The layers tell each other what they did in response headers, and the
    one decision (decide.hpp) reads these signals as values:

    - `Rebound-Retried: exhausted`: the layer that answered retried and gave up; the layer
      above does not retry it again (stop reason `layered`, unless `retry_layered: true`).
    - `Rebound-Overloaded: 1`: rebound answered a 503 itself because the dependency's breaker
      is open, its retry budget is spent or rebound has no room for the connection; the layer
      above backs off instead of retrying (stop reason `overloaded`, always).

    Beast-free: the HTTP attempt hands in the header values it found. */
#include "proxy/retry/decide.hpp"
#include "proxy/retry/error_type.hpp"

#include <optional>
#include <string_view>

namespace rebound::retry {

inline constexpr std::string_view retried_header = "Rebound-Retried";
inline constexpr std::string_view retried_exhausted = "exhausted";
inline constexpr std::string_view overloaded_header = "Rebound-Overloaded";

/// The header values of a response that speak of the layer below, as found (unset: absent).
struct layer_headers {
  std::optional<std::string_view> retried;     ///< Rebound-Retried
  std::optional<std::string_view> attempts;    ///< Rebound-Attempts
  std::optional<std::string_view> error;       ///< Rebound-Error
  std::optional<std::string_view> overloaded;  ///< Rebound-Overloaded
};

/// The fields of an answer's head the retry step reads: R-5's Retry-After and the signals
/// above, as found (the first of each; unset: absent).
struct answer_fields {
  std::optional<std::string_view> retry_after;
  layer_headers layers;
  /// Keeps `value` when `name` (in any case) is one of them not yet seen, so that one pass
  /// over a head reads all five.
  void take(std::string_view name, std::string_view value);
};

/** What a response says of the layer that sent it. `gave_up`: it says `Rebound-Retried:
    exhausted`, or (a rebound that predates that header) it is rebound's own error answer
    after more than one attempt. A value that cannot be read says nothing: a stranger's
    header must not switch retries off. */
layer_signal read_layer_signal(const layer_headers& h);

/** Whether a loop that stopped for `r` after `attempts` attempts retried and gave up, so its
    answer carries `Rebound-Retried: exhausted`. Only stops that leave a retryable failure
    after at least one retry count: R-2's count spent, R-3's deadline, R-5's Retry-After past
    the deadline, and `layered` (a layer below gave up, which the answer passes on). A final
    outcome (a 404 after two 503s), a drain or a refused credential are not "gave up". */
bool gave_up_after_retrying(stop_reason r, unsigned attempts);

/// Whether rebound's own answer of type `t` tells the caller to back off: `Rebound-Overloaded`.
bool answers_overloaded(error_type t);

}  // namespace rebound::retry
