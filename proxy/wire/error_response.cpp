#include "proxy/wire/error_response.hpp"

#include "proxy/observe/json.hpp"
#include "proxy/retry/layers.hpp"

namespace rebound::http {

namespace bhttp = boost::beast::http;

std::string error_json(std::string_view type, std::string_view message, const error_reply* e) {
  std::string body;
  observe::json_writer w(body);
  w.open_object().key("error").open_object().field("type", type).field("message", message);
  if (e) w.field("dependency", e->dependency).field("attempts", e->attempts);
  w.close_object().close_object();
  body += '\n';
  return body;
}

namespace {

bhttp::response<bhttp::string_body> build(std::string_view type, const error_reply& e, bool overloaded,
                                          bool keep_alive) {
  bhttp::response<bhttp::string_body> res{static_cast<bhttp::status>(e.status), 11};
  res.set(bhttp::field::content_type, "application/json");
  res.set("Rebound-Error", type);
  res.set(bhttp::field::via, "1.1 rebound");
  // Every answer says how many attempts went upstream, rebound's own ones too (SPEC 6).
  res.set("Rebound-Attempts", std::to_string(e.attempts));
  if (e.retry_after_s > 0) res.set(bhttp::field::retry_after, std::to_string(e.retry_after_s));
  if (e.gave_up) res.set(retry::retried_header, retry::retried_exhausted);
  if (overloaded) res.set(retry::overloaded_header, "1");
  res.body() = error_json(type, e.message, &e);
  res.keep_alive(keep_alive);
  res.prepare_payload();
  return res;
}

}  // namespace

bhttp::response<bhttp::string_body> make_error_response(const error_reply& e, bool keep_alive) {
  return build(to_string(e.type), e, e.status == 503 && retry::answers_overloaded(e.type), keep_alive);
}

bhttp::response<bhttp::string_body> make_error_response(std::string_view type, const error_reply& e, bool keep_alive) {
  return build(type, e, false, keep_alive);
}

}  // namespace rebound::http
