#pragma once
/** Parsers for the typed scalars of the YAML (durations, sizes, endpoints).

    Each returns the value or a message that says what was given and what is accepted, so
    the loader can prefix it with the file position and key path. */
#include "config/config.hpp"

#include <optional>
#include <string>
#include <string_view>

namespace rebound::config {

template <class T>
struct parsed {
  std::optional<T> value;
  std::string error;  ///< set when !value
  static parsed fail(std::string msg) { return parsed{std::nullopt, std::move(msg)}; }
  static parsed ok(T v) { return parsed{std::move(v), {}}; }
};

/// `250ms`, `1s`, `2m`, `24h` (a non-negative integer and a unit; no unit is an error).
parsed<duration> parse_duration(std::string_view text);

/// `true` or `false`.
parsed<bool> parse_bool(std::string_view text);

/// An HTTP field name (RFC 9110 5.1: a token), e.g. `X-Event-ID`.
parsed<std::string> parse_header_name(std::string_view text);

/// `512KiB`, `1MiB`, `2GiB`, `100B` or a plain number of bytes.
parsed<std::uint64_t> parse_size(std::string_view text);

/// `127.0.0.1:3128`, `[::1]:3128`, `0.0.0.0:0`: an IP literal and a port (0 = any free port).
parsed<endpoint> parse_endpoint(std::string_view text);

/// The inverses, in the largest unit that is exact: 90000ms -> "90s", 1048576 -> "1MiB".
std::string format_duration(duration d);
std::string format_size(std::uint64_t bytes);

/// `http://host[:port]` or `https://host[:port]` (TLS origination), with an optional
/// trailing `/`: no path, query or credentials.
parsed<origin_url> parse_origin(std::string_view text);
/// The inverse: `http://host:port` (IPv6 literals in brackets).
std::string format_origin(const origin_url& o);

/// A URL rebound calls itself (a token endpoint): http:// or https://, path and query kept,
/// no credentials, no fragment.
parsed<service_url> parse_service_url(std::string_view text);
std::string format_service_url(const service_url& u);

// The scalars of the schema's enumerations and bounded numbers.
parsed<context_kind> parse_context(std::string_view s);
parsed<jitter_kind> parse_jitter(std::string_view s);
parsed<unsigned> parse_max_retries(std::string_view s);
/// A plain decimal between 0 and 1 (`0.2`, `1`).
parsed<double> parse_ratio(std::string_view s);
parsed<unsigned> parse_count(std::string_view s);
parsed<breaker_mode> parse_breaker_mode(std::string_view s);
parsed<unsigned> parse_workers(std::string_view s);
/// The metrics' `service` label: a name, not free text, so dashboards can select on it.
parsed<std::string> parse_service(std::string_view s);
parsed<std::string> parse_log_level(std::string_view s);
parsed<unknown_hosts_policy> parse_unknown_hosts(std::string_view s);

/// ASCII lower case (host names, header names).
std::string lower(std::string_view s);

/// Levenshtein distance, for "did you mean" on unknown keys.
std::size_t edit_distance(std::string_view a, std::string_view b);

}  // namespace rebound::config
