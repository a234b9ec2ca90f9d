#pragma once
/** gRPC's `grpc-timeout` request header (the gRPC over HTTP/2 protocol): how long the caller
    waits for the call. rebound reads it as the call's deadline when it is shorter than the
    route's total_timeout, and sends each attempt the time that remains. */
#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace rebound::retry {

/** `TimeoutValue TimeoutUnit`: 1 to 8 ASCII digits and one of H M S m u n. nullopt for
    anything else (such a header is ignored, as gRPC servers do). A value past `longest_grpc_timeout`
    (99999999H is ~11,000 years) is read as that: a steady clock cannot add more than ~292
    years without overflowing into the past. */
std::optional<std::chrono::microseconds> parse_grpc_timeout(std::string_view value);
inline constexpr std::chrono::microseconds longest_grpc_timeout = std::chrono::hours(24 * 365 * 100);

/** A remaining time as a `grpc-timeout` value: whole milliseconds (`250m`), rounded down and
    at least 1 so an attempt never tells the server it has no time at all; seconds once the
    milliseconds outgrow the 8 digits allowed. */
std::string format_grpc_timeout(std::chrono::microseconds left);

}  // namespace rebound::retry
