#pragma once
/** SPEC section 6's error types: every failure rebound reports, retries or answers is one of
    these. Beast-free, so the config and the pure retry rules can name them without pulling
    in the HTTP machinery; the answers themselves are made in proxy/wire/error_response. */
#include <string_view>

namespace rebound::retry {

enum class error_type {
  connect_refused,
  connect_reset,
  connect_timeout,
  dns_failure,
  tls_handshake_timeout,
  tls_certificate,
  attempt_timeout,
  deadline_exceeded,
  circuit_open,
  budget_exhausted,
  retry_after_exceeds_deadline,
  auth_refresh_failed,
  bad_request,
  unknown_host,
  upstream_protocol_error,
  overloaded,         ///< 503: limits.max_connections reached
  loop_detected,      ///< 508: the request targets this rebound or already passed through it
  store_unavailable,  ///< 503: a call to hand over could not be made durable, so no 202 (R-8)
  store_full,         ///< 507: the store holds store.max_size (or its disk is full): no new task
  upgrade_refused,    ///< 403: the route's `upgrades:` does not allow the protocol asked for
  concurrency_limited,  ///< 503: the dependency's concurrency limit is reached (issue 51)
};

std::string_view to_string(error_type t);

/// The status SPEC section 6 gives each type (bad_request varies: 400, 413, 431, 501...).
unsigned default_status(error_type t);

/// The Retry-After (seconds) rebound sends with its own answer of type `t`; 0: none. An open
/// breaker's depends on the breaker and is set where it refuses.
unsigned default_retry_after_s(error_type t);

}  // namespace rebound::retry
