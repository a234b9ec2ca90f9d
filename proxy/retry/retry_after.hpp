#pragma once
/** Retry-After (RFC 9110 section 10.2.3), and how it combines with the backoff and the
    deadline of R-3. */
#include "proxy/retry/error_type.hpp"

#include <chrono>
#include <optional>
#include <string_view>

namespace rebound::retry {

using duration = std::chrono::milliseconds;

/** The wait a Retry-After value asks for: delta-seconds, or an HTTP-date (IMF-fixdate, the
    obsolete RFC 850 form, or asctime) relative to `now`; a date in the past asks for 0.
    nullopt when the value is neither. */
std::optional<duration> parse_retry_after(std::string_view value, std::chrono::system_clock::time_point now);

/** A gRPC server's `grpc-retry-pushback-ms` (gRPC A6): a non-negative decimal count of
    milliseconds to wait. nullopt for anything else, which A6 reads as "do not retry". */
std::optional<duration> parse_grpc_pushback(std::string_view value);

struct wait_plan {
  bool retry = false;                 ///< false: stop now and return the last outcome
  duration wait{0};                   ///< how long to wait before the retry
  std::optional<error_type> why_not;  ///< retry_after_exceeds_deadline or deadline_exceeded
};

/** together: wait `max(backoff, retry_after)`; a Retry-After that reaches past
    the deadline ends the loop at once, and so does a wait that leaves no time for
    another attempt of at least `min_attempt`. */
wait_plan plan_wait(duration backoff, std::optional<duration> retry_after, duration remaining, duration min_attempt);

}  // namespace rebound::retry
