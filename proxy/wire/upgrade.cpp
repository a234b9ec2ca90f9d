#include "proxy/wire/upgrade.hpp"

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/rfc7230.hpp>

#include <algorithm>
#include <vector>

namespace rebound::http {

namespace bhttp = boost::beast::http;

namespace {

std::string_view view(boost::beast::string_view s) { return {s.data(), s.size()}; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

/// Whether a Connection field names `option` (its values are tokens, RFC 9110 section 7.6.1).
/// Fields: a request's head_fields or an upstream response's field_list.
template <class Fields>
bool connection_names(const Fields& f, std::string_view option) {
  for (auto const& field : f) {
    if (field.name() != bhttp::field::connection) continue;
    for (auto token : bhttp::token_list{field.value()})
      if (boost::beast::iequals(token, option)) return true;
  }
  return false;
}

/// The protocol names of every Upgrade field, in order; its elements are `name[/version]`,
/// which Beast's token_list would stop at. Empty elements (`a, , b`) are skipped (RFC 9110 5.6.1).
template <class Fields>
std::vector<std::string_view> upgrade_protocols(const Fields& f) {
  std::vector<std::string_view> names;
  for (auto const& field : f) {
    if (field.name() != bhttp::field::upgrade) continue;
    auto rest = view(field.value());
    while (!rest.empty()) {
      auto const comma = rest.find(',');
      auto const element = trim(rest.substr(0, comma));
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
      if (!element.empty()) names.push_back(element.substr(0, element.find('/')));
    }
  }
  return names;
}

/// Whether an Upgrade field offers `protocol` among others (a request's offer).
bool upgrade_offers(const head_fields& f, std::string_view protocol) {
  auto const names = upgrade_protocols(f);
  return std::any_of(names.begin(), names.end(), [&](auto n) { return boost::beast::iequals(n, protocol); });
}

bool base64_char(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' || c == '/';
}

/// RFC 6455 section 4.1, item 7: a nonce of 16 bytes in base64 is 22 characters and `==`.
bool valid_websocket_key(std::string_view key) {
  key = trim(key);
  return key.size() == 24 && key.substr(22) == "==" && std::all_of(key.begin(), key.begin() + 22, base64_char);
}

bool valid_websocket_version(std::string_view v) {
  v = trim(v);
  return !v.empty() && v.size() <= 3 && std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; });
}

upgrade_ask malformed(std::string why) { return {upgrade_ask::kind::malformed, std::move(why)}; }

}  // namespace

upgrade_ask read_upgrade(const request_head& req) {
  if (req.count(bhttp::field::upgrade) == 0 || req.version() < 11) return {};
  if (!connection_names(req, "upgrade") || !upgrade_offers(req, websocket_protocol)) return {};
  if (req.method() != bhttp::verb::get) return malformed("a WebSocket handshake is a GET (RFC 6455 section 4.1)");
  // After a 101 the connection carries frames: a body sent with the handshake would be read as
  // frames by one side and as a body by the other.
  if (req.count(bhttp::field::transfer_encoding) > 0)
    return malformed("a WebSocket handshake carries no body (Transfer-Encoding)");
  if (auto it = req.find(bhttp::field::content_length); it != req.end() && trim(view(it->value())) != "0")
    return malformed("a WebSocket handshake carries no body (Content-Length)");
  if (req.count(bhttp::field::sec_websocket_key) != 1 ||
      !valid_websocket_key(view(req[bhttp::field::sec_websocket_key])))
    return malformed("Sec-WebSocket-Key must be one field holding 16 bytes in base64 (RFC 6455 section 4.1)");
  if (req.count(bhttp::field::sec_websocket_version) != 1 ||
      !valid_websocket_version(view(req[bhttp::field::sec_websocket_version])))
    return malformed("Sec-WebSocket-Version must be one field holding a version number (RFC 6455 section 4.1)");
  return {upgrade_ask::kind::websocket, {}};
}

namespace {

template <class Fields>
void carry_upgrade(Fields& f) {
  f.set(bhttp::field::connection, "Upgrade");
  f.set(bhttp::field::upgrade, websocket_protocol);
}

}  // namespace

void carry_websocket_upgrade(head_fields& f) { carry_upgrade(f); }
void carry_websocket_upgrade(field_list& f) { carry_upgrade(f); }

std::string switch_mismatch(const field_list& res) {
  // A 101 names the protocols it switched to, in layer order (RFC 9110 7.8): `h2c, websocket` is
  // WebSocket over HTTP/2, not the switch asked for, so the answer must name websocket alone.
  auto const names = upgrade_protocols(res);
  if (names.size() != 1 || !boost::beast::iequals(names.front(), websocket_protocol)) {
    auto named = view(res[bhttp::field::upgrade]);
    if (named.size() > 64) named = named.substr(0, 64);  // a message, not a copy of the head
    return named.empty() ? "the upstream answered 101 without an Upgrade field"
                         : "the upstream switched to \"" + std::string(named) + "\", not websocket alone";
  }
  if (!connection_names(res, "upgrade")) return "the upstream's 101 has no Connection: upgrade";
  return {};
}

}  // namespace rebound::http
