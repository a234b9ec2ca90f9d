#include "proxy/retry/error_type.hpp"

namespace rebound::retry {

std::string_view to_string(error_type t) {
  switch (t) {
    case error_type::connect_refused:
      return "connect_refused";
    case error_type::connect_reset:
      return "connect_reset";
    case error_type::connect_timeout:
      return "connect_timeout";
    case error_type::dns_failure:
      return "dns_failure";
    case error_type::tls_handshake_timeout:
      return "tls_handshake_timeout";
    case error_type::tls_certificate:
      return "tls_certificate";
    case error_type::attempt_timeout:
      return "attempt_timeout";
    case error_type::deadline_exceeded:
      return "deadline_exceeded";
    case error_type::circuit_open:
      return "circuit_open";
    case error_type::budget_exhausted:
      return "budget_exhausted";
    case error_type::retry_after_exceeds_deadline:
      return "retry_after_exceeds_deadline";
    case error_type::auth_refresh_failed:
      return "auth_refresh_failed";
    case error_type::bad_request:
      return "bad_request";
    case error_type::unknown_host:
      return "unknown_host";
    case error_type::upstream_protocol_error:
      return "upstream_protocol_error";
    case error_type::loop_detected:
      return "loop_detected";
    case error_type::overloaded:
      return "overloaded";
    case error_type::store_unavailable:
      return "store_unavailable";
    case error_type::store_full:
      return "store_full";
    case error_type::upgrade_refused:
      return "upgrade_refused";
    case error_type::concurrency_limited:
      return "concurrency_limited";
  }
  return "upstream_protocol_error";
}

unsigned default_status(error_type t) {
  switch (t) {
    case error_type::attempt_timeout:
    case error_type::deadline_exceeded:
      return 504;
    case error_type::circuit_open:
    case error_type::budget_exhausted:
    case error_type::overloaded:
    case error_type::store_unavailable:
    case error_type::concurrency_limited:
      return 503;
    case error_type::bad_request:
      return 400;
    case error_type::unknown_host:
    case error_type::upgrade_refused:
      return 403;
    case error_type::loop_detected:
      return 508;
    case error_type::store_full:
      return 507;
    default:
      return 502;
  }
}

unsigned default_retry_after_s(error_type t) {
  // The limit frees slots as attempts end, within the dependency's latency: one second is
  // the least Retry-After can say, and enough for the caller to come back to room.
  return t == error_type::concurrency_limited ? 1 : 0;
}

}  // namespace rebound::retry
