#include "helpers.hpp"

#include <cstdio>
#include <regex>

namespace itest {

Script respond(unsigned status) {
  Script s;
  s.status = status;
  s.body = "x";
  return s;
}

std::string absolute_request(std::string_view method, std::string_view authority, std::string_view path,
                             std::string_view extra, std::string_view body) {
  std::string out;
  out.append(method).append(" http://").append(authority).append(path).append(" HTTP/1.1\r\n");
  out.append("Host: ").append(authority).append("\r\n");
  out.append(extra);
  if (!body.empty()) out.append("Content-Length: ").append(std::to_string(body.size())).append("\r\n");
  out.append("\r\n");
  out.append(body);
  return out;
}

std::string chunked_request(std::string_view method, std::string_view authority, std::string_view path,
                            std::string_view body, std::string_view extra) {
  std::string out = absolute_request(method, authority, path, std::string("Transfer-Encoding: chunked\r\n").append(extra));
  for (std::size_t at = 0; at < body.size(); at += 7000) {
    auto const piece = body.substr(at, 7000);
    char size[32];
    std::snprintf(size, sizeof size, "%zx\r\n", piece.size());
    out.append(size).append(piece).append("\r\n");
  }
  return out + "0\r\n\r\n";
}

::testing::AssertionResult IsReboundError(const std::optional<Response>& r, unsigned status,
                                          std::initializer_list<std::string_view> types) {
  std::string expected;
  for (auto t : types) expected.append(expected.empty() ? "" : " or ").append(t);
  if (!r)
    return ::testing::AssertionFailure() << "no response; expected " << status << " " << expected
                                         << " (last raw_exchange: " << last_exchange_error() << ")";
  auto describe = [&] {
    return "status " + std::to_string(r->status) + ", Rebound-Error: " + r->header("Rebound-Error").value_or("<none>") +
           ", body: " + r->body.substr(0, 400);
  };
  if (r->status != status)
    return ::testing::AssertionFailure() << "expected status " << status << " (" << expected << "), got " << describe();
  auto type = r->header("Rebound-Error");
  if (!type) return ::testing::AssertionFailure() << "no Rebound-Error header; " << describe();
  bool known = false;
  for (auto t : types) known = known || *type == t;
  if (!known) return ::testing::AssertionFailure() << "expected Rebound-Error " << expected << "; " << describe();
  auto json = parse_json(r->body);
  if (!json) return ::testing::AssertionFailure() << "body is not JSON; " << describe();
  auto err = json->get("error");
  if (!err || err->type != Json::Type::object)
    return ::testing::AssertionFailure() << "body has no \"error\" object; " << describe();
  auto t = err->get("type");
  if (!t || t->type != Json::Type::string || t->s != *type)
    return ::testing::AssertionFailure() << "error.type differs from Rebound-Error; " << describe();
  auto m = err->get("message");
  if (!m || m->type != Json::Type::string || m->s.empty())
    return ::testing::AssertionFailure() << "error.message missing or empty; " << describe();
  auto d = err->get("dependency");
  if (!d || d->type != Json::Type::string)
    return ::testing::AssertionFailure() << "error.dependency missing; " << describe();
  auto a = err->get("attempts");
  if (!a || a->type != Json::Type::number || a->n < 0 || a->n != static_cast<double>(static_cast<long>(a->n)))
    return ::testing::AssertionFailure() << "error.attempts missing or not a whole number; " << describe();
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult IsReboundRequestVia(std::string_view via) {
  static const std::regex entry("1\\.1 rebound \\([0-9a-f]{8}\\)");
  if (std::regex_match(via.begin(), via.end(), entry)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "Via: \"" << via << "\" is not rebound's request entry";
}

}  // namespace itest
