#pragma once
/** The answers rebound makes itself (SPEC section 6): a status, `Rebound-Error: TYPE`, and
    the JSON body `{"error": {"type", "message", "dependency", "attempts"}}`. */
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

#include <string>
#include <string_view>

namespace rebound::http {

/// SPEC section 6's error types: every failure rebound reports is one of these.
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
  overloaded,     ///< 503: limits.max_connections reached
  loop_detected,  ///< 508: the request targets this rebound or already passed through it
};

std::string_view to_string(error_type t);

/// The status SPEC section 6 gives each type (bad_request varies: 400, 413, 431, 501...).
unsigned default_status(error_type t);

struct error_reply {
  unsigned status = 502;
  error_type type = error_type::upstream_protocol_error;
  std::string message;
  std::string dependency;  ///< empty when no dependency was resolved yet
  unsigned attempts = 0;
  unsigned retry_after_s = 0;  ///< > 0: sent as Retry-After (circuit_open: time until a probe may go)
};

/** Builds the complete response. `keep_alive` false adds `Connection: close`: rebound
    closes after any error that leaves unread request bytes on the connection. */
boost::beast::http::response<boost::beast::http::string_body> make_error_response(const error_reply& e, bool keep_alive);

}  // namespace rebound::http
