#pragma once
/** what may be retried. The one place that decides whether an attempt's outcome is
    retryable; the retry loop asks it and nothing else. */
#include "proxy/retry/error_type.hpp"

#include <bitset>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rebound::retry {

/// What one attempt produced: an upstream status, or rebound's own error type.
struct attempt_outcome {
  attempt_outcome(std::optional<unsigned> s = std::nullopt, std::optional<error_type> e = std::nullopt,
                  std::optional<unsigned> g = std::nullopt)
      : status(s), error(e), grpc_status(g) {}
  std::optional<unsigned> status;   ///< set when a response head arrived
  std::optional<error_type> error;  ///< set when no response arrived
  /// A gRPC call's `grpc-status` (trailers, or a trailers-only head); it decides, not `status`.
  std::optional<unsigned> grpc_status;
};

enum class verdict {
  success,    ///< a response that is not a failure (2xx, 3xx, and 4xx/5xx that R-4 calls final)
  retryable,  ///< R-4 "MUST retry with backoff"
  final,      ///< R-4 "MUST NOT retry", or a failure outside the retryable set
};

/** The retryable classes of R-4, as a set a route's `retry_on` may narrow. Named by the
    config spelling: `408`, `429`, `500`, `502`, `503`, `504`, `connect_refused`,
    `connect_reset`, `timeout` (socket, connect or attempt timeout), `dns_failure`,
    `tls_handshake_timeout`, and R-4's gRPC column: `grpc_unavailable` (14),
    `grpc_deadline_exceeded` (4), `grpc_resource_exhausted` (8), `grpc_aborted` (10). */
class retry_on {
 public:
  enum class cls {
    s408,
    s429,
    s500,
    s502,
    s503,
    s504,
    connect_refused,
    connect_reset,
    timeout,
    dns_failure,
    tls_handshake_timeout,
    grpc_unavailable,
    grpc_deadline_exceeded,
    grpc_resource_exhausted,
    grpc_aborted,
    count
  };

  /// Every class of the R-4 table (`retry_on: default`).
  static retry_on r4_default();
  /// None: nothing is retried.
  static retry_on none() { return retry_on{}; }

  /** Parses one config entry. A known non-retryable class (400, 401, 403, 404, 409, 422,
      `tls_certificate`, ...) gives an error message naming R-4; so does an unknown one. */
  struct parse_result {
    std::optional<cls> value;
    std::string error;
  };
  static parse_result parse(std::string_view entry);

  /// The config spelling of each class in the set, in R-4's table order.
  std::vector<std::string_view> names() const;

  void add(cls c) { bits_.set(static_cast<std::size_t>(c)); }
  bool contains(cls c) const { return bits_.test(static_cast<std::size_t>(c)); }
  bool operator==(const retry_on&) const = default;

 private:
  std::bitset<static_cast<std::size_t>(cls::count)> bits_;
};

/// The class an outcome belongs to, if it is one of R-4's retryable ones.
std::optional<retry_on::cls> retryable_class(const attempt_outcome& o);

/** How logs and dead letters name an outcome: `http_503`, `grpc_14`, or the error type
    (`connect_refused`). */
std::string outcome_name(const attempt_outcome& o);

/// R-4 applied through the route's `retry_on`.
verdict classify(const attempt_outcome& o, const retry_on& allowed);

/// a DNS failure is retried at most once (2 attempts in all), whatever max_retries says.
inline constexpr unsigned dns_failure_max_attempts = 2;

}  // namespace rebound::retry
