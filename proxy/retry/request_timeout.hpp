#pragma once
/** Deadlines travel (issue 22): `X-Request-Timeout` says how long the caller will wait for
    this request. It caps the request's total_timeout, and rebound sends on what is left
    of it in the same header on every attempt, so no hop down the chain works for an answer
    nobody is waiting for any more (gRPC's grpc-timeout does the same for gRPC calls).

    The one place the header is read and written. Pure: the caller reads the clock. */
#include <chrono>
#include <string>
#include <string_view>
#include <variant>

namespace rebound::retry {

inline constexpr std::string_view request_timeout_header = "X-Request-Timeout";

/** A value above this is read as this: it can no longer cap any total_timeout (R-3 allows
    at most 24 h), and a deadline this far out stays far from the clock's overflow however
    many digits a hostile caller sends. */
inline constexpr std::chrono::milliseconds max_request_timeout = std::chrono::hours(24 * 365);

/// Why a value could not be read, in words for the 400's message.
struct malformed_timeout {
  std::string why;
};

/** Reads one header value: whole or decimal seconds (`2`, `1.5`, at most millisecond
    precision is kept) or whole milliseconds (`250ms`), surrounded by optional spaces.
    Anything else (negative, exponent, empty, a unit other than `ms`, a list) is malformed:
    a caller that asked for a deadline must not get none because of a typo. */
std::variant<std::chrono::milliseconds, malformed_timeout> parse_request_timeout(std::string_view value);

/// The header value for a hop whose answer is awaited until `deadline`: whole milliseconds
/// left (`1234ms`), rounded down so the next hop gives up first; `0ms` once it has passed.
std::string format_request_timeout(std::chrono::steady_clock::time_point deadline,
                                   std::chrono::steady_clock::time_point now);

}  // namespace rebound::retry
