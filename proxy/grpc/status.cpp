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

}  // namespace rebound::grpc
