#include "proxy/grpc/status.hpp"

namespace rebound::grpc {

code code_for(retry::error_type t) {
  using e = retry::error_type;
  switch (t) {
    case e::deadline_exceeded:
    case e::attempt_timeout:
    case e::retry_after_exceeds_deadline:
      return code::deadline_exceeded;
    case e::auth_refresh_failed:
      return code::unauthenticated;
    case e::upstream_protocol_error:
    case e::loop_detected:
      return code::internal;
    case e::bad_request:
      return code::invalid_argument;
    case e::unknown_host:
      return code::permission_denied;
    case e::concurrency_limited:
      return code::resource_exhausted;
    default:
      return code::unavailable;
  }
}

std::string encode_message(std::string_view text) {
  static constexpr char hex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  for (unsigned char c : text) {
    if (c >= 0x20 && c <= 0x7E && c != '%') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 0xF];
    }
  }
  return out;
}

h2::fields status_fields(code status, std::string_view message, std::string_view error) {
  h2::fields f{{"grpc-status", std::to_string(static_cast<unsigned>(status))}, {"grpc-message", encode_message(message)}};
  if (!error.empty()) f.push_back({"rebound-error", std::string(error)});
  return f;
}

h2::message trailers_only(code status, std::string_view message, std::string_view error) {
  h2::message m;
  m.head = {{":status", "200"}, {"content-type", "application/grpc"}};
  for (auto& f : status_fields(status, message, error)) m.head.push_back(std::move(f));
  return m;
}

h2::message refusal(h2::stream_refusal why, std::string_view message) {
  auto const c = why == h2::stream_refusal::too_slow ? code::deadline_exceeded : code::resource_exhausted;
  return trailers_only(c, message, retry::to_string(retry::error_type::bad_request));
}

unsigned counted_status(const h2::fields& head, const h2::fields& trailers) {
  auto const* status = h2::message::find_in(head, ":status");
  if (!status) return 502;
  if (*status != "200") {
    unsigned n = 0;
    for (char c : *status) n = c >= '0' && c <= '9' && n < 1000 ? n * 10 + static_cast<unsigned>(c - '0') : 1000;
    return n >= 100 && n <= 599 ? n : 502;
  }
  auto const* grpc = h2::message::find_in(head, "grpc-status");
  if (!grpc) grpc = h2::message::find_in(trailers, "grpc-status");
  if (!grpc || grpc->empty() || grpc->size() > 2) return 502;
  unsigned n = 0;
  for (char c : *grpc) {
    if (c < '0' || c > '9') return 502;
    n = n * 10 + static_cast<unsigned>(c - '0');
  }
  // google.rpc.Code's HTTP mapping (googleapis/google/rpc/code.proto).
  static constexpr unsigned http[] = {200, 499, 500, 400, 504, 404, 409, 403, 429,
                                      400, 409, 400, 501, 500, 503, 500, 401};
  return n < std::size(http) ? http[n] : 500;
}

}  // namespace rebound::grpc
