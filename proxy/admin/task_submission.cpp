#include "proxy/admin/task_submission.hpp"

#include "proxy/wire/bounded_parser.hpp"
#include "proxy/idempotency/key.hpp"

#include <boost/beast/core/string.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>

#include <algorithm>
#include <cctype>

namespace rebound::admin {
namespace {

bool valid_field(std::string_view name, std::string_view value) {
  if (name.empty()) return false;
  for (unsigned char c : name)
    if (c <= 32 || c >= 127 ||
        std::string_view("\"(),/:;<=>?@[\\]{}").find(static_cast<char>(c)) != std::string_view::npos)
      return false;
  return value.find_first_of(std::string_view("\r\n\0", 3)) == std::string_view::npos;
}

submission_error refused(std::string message) {
  return submission_error{boost::beast::http::status::bad_request, "bad_request", std::move(message)};
}

}  // namespace

bool reserved_field(std::string_view name) {
  for (std::string_view r : {"host", "content-length", "transfer-encoding", "connection", "keep-alive", "te", "trailer",
                             "upgrade", "proxy-connection", "expect"})
    if (boost::beast::iequals(name, r)) return true;
  return false;
}

std::variant<task_submission, submission_error> read_task_submission(std::string_view text, std::uint64_t max_body,
                                                                     std::size_t max_head) {
  boost::system::error_code jec;
  auto const doc = boost::json::parse(text, jec);
  if (jec || !doc.is_object()) return refused("the body must be a JSON object");
  auto const& o = doc.as_object();
  for (auto const& kv : o) {
    std::string_view const k = kv.key();
    if (k != "target" && k != "method" && k != "headers" && k != "body" && k != "policy_id" && k != "idempotency_key")
      return refused("unknown field \"" + std::string(k) + "\"");
    if (k != "headers" && !kv.value().is_string()) return refused("\"" + std::string(k) + "\" must be a string");
  }
  auto str = [&](std::string_view k) -> std::optional<std::string> {
    auto const* v = o.if_contains(k);
    if (!v || !v->is_string()) return std::nullopt;
    return std::string(v->as_string());
  };
  task_submission s;
  auto const url = str("target");
  if (!url || !url->starts_with("http://"))
    return refused("target must be an absolute http:// URL (an https origin is a dependency's `origin:`)");
  s.method = str("method").value_or("POST");
  if (s.method.empty() || s.method == "CONNECT" ||
      !std::all_of(s.method.begin(), s.method.end(), [](char c) { return std::isupper(static_cast<unsigned char>(c)); }))
    return refused("method must be an HTTP method other than CONNECT");
  auto parsed = plan::parse_request_target(s.method, *url, "", 0, 11);
  if (!parsed.value) return refused("target: " + parsed.error);
  s.target = std::move(*parsed.value);
  s.url = *url;
  s.body = str("body").value_or("");
  if (s.body.size() > max_body)
    return submission_error{boost::beast::http::status::payload_too_large, "bad_request",
                            "body larger than async.max_body"};
  // The proxy port's limits on a head (field_limits, limits.max_request_head): a task past
  // them could never be sent, so it is refused here rather than dead-lettered later.
  std::size_t head_bytes = 0;
  if (auto const* h = o.if_contains("headers")) {
    if (!h->is_object()) return refused("headers must be an object");
    for (auto const& kv : h->as_object()) {
      if (!kv.value().is_string()) return refused("header values must be strings");
      std::string_view const name = kv.key();
      std::string_view const value = kv.value().as_string();
      if (!valid_field(name, value)) return refused("invalid header \"" + std::string(name) + "\"");
      if (name.size() + value.size() > http::field_limits{}.max_field)
        return refused("header \"" + std::string(name) + "\" is larger than one field may be (" +
                       std::to_string(http::field_limits{}.max_field) + " bytes)");
      head_bytes += name.size() + value.size() + 4;  // ": " and CRLF
      if (head_bytes > max_head) return refused("headers larger than limits.max_request_head");
      s.headers.emplace_back(std::string(name), std::string(value));
    }
  }
  s.policy_id = str("policy_id");
  s.idempotency_key = str("idempotency_key");
  if (s.idempotency_key)
    if (auto problem = idempotency::key_problem(*s.idempotency_key)) return refused("idempotency_key: " + *problem);
  return s;
}

}  // namespace rebound::admin
