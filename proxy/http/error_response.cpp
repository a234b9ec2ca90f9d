#include "proxy/http/error_response.hpp"

#include "proxy/observe/json.hpp"

namespace rebound::http {

namespace bhttp = boost::beast::http;

std::string_view to_string(error_type t) {
  switch (t) {
    case error_type::connect_refused: return "connect_refused";
    case error_type::connect_reset: return "connect_reset";
    case error_type::connect_timeout: return "connect_timeout";
    case error_type::dns_failure: return "dns_failure";
    case error_type::tls_handshake_timeout: return "tls_handshake_timeout";
    case error_type::tls_certificate: return "tls_certificate";
    case error_type::attempt_timeout: return "attempt_timeout";
    case error_type::deadline_exceeded: return "deadline_exceeded";
    case error_type::circuit_open: return "circuit_open";
    case error_type::budget_exhausted: return "budget_exhausted";
    case error_type::retry_after_exceeds_deadline: return "retry_after_exceeds_deadline";
    case error_type::auth_refresh_failed: return "auth_refresh_failed";
    case error_type::bad_request: return "bad_request";
    case error_type::unknown_host: return "unknown_host";
    case error_type::upstream_protocol_error: return "upstream_protocol_error";
    case error_type::loop_detected: return "loop_detected";
    case error_type::overloaded: return "overloaded";
  }
  return "upstream_protocol_error";
}

unsigned default_status(error_type t) {
  switch (t) {
    case error_type::attempt_timeout:
    case error_type::deadline_exceeded: return 504;
    case error_type::circuit_open:
    case error_type::budget_exhausted:
    case error_type::overloaded: return 503;
    case error_type::bad_request: return 400;
    case error_type::unknown_host: return 403;
    case error_type::loop_detected: return 508;
    default: return 502;
  }
}

bhttp::response<bhttp::string_body> make_error_response(const error_reply& e, bool keep_alive) {
  bhttp::response<bhttp::string_body> res{static_cast<bhttp::status>(e.status), 11};
  auto const type = to_string(e.type);
  res.set(bhttp::field::content_type, "application/json");
  res.set("Rebound-Error", type);
  res.set(bhttp::field::via, "1.1 rebound");
  // Every answer says how many attempts went upstream, rebound's own ones too (SPEC 6).
  res.set("Rebound-Attempts", std::to_string(e.attempts));
  if (e.retry_after_s > 0) res.set(bhttp::field::retry_after, std::to_string(e.retry_after_s));
  std::string body = "{\"error\":{\"type\":";
  observe::append_json_string(body, type);
  body += ",\"message\":";
  observe::append_json_string(body, e.message);
  body += ",\"dependency\":";
  observe::append_json_string(body, e.dependency);
  body += ",\"attempts\":" + std::to_string(e.attempts) + "}}\n";
  res.body() = std::move(body);
  res.keep_alive(keep_alive);
  res.prepare_payload();
  return res;
}

}  // namespace rebound::http
