#include "proxy/http/wire/hop_by_hop.hpp"

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/rfc7230.hpp>

#include <string>
#include <vector>

namespace rebound::http {

namespace bhttp = boost::beast::http;

void strip_hop_by_hop(bhttp::fields& f) {
  // Collect first: erasing while a token_list still views the Connection value is unsafe.
  std::vector<std::string> named;
  for (auto const& h : f) {
    if (h.name() == bhttp::field::connection)
      for (auto token : bhttp::token_list{h.value()}) named.emplace_back(token);
  }
  for (auto const& n : named) f.erase(n);
  for (auto name : {bhttp::field::connection, bhttp::field::proxy_connection, bhttp::field::keep_alive,
                    bhttp::field::te, bhttp::field::trailer, bhttp::field::transfer_encoding, bhttp::field::upgrade,
                    bhttp::field::proxy_authorization, bhttp::field::proxy_authenticate}) {
    f.erase(name);
  }
}

void add_via(bhttp::fields& f, unsigned received_version, std::string_view token) {
  // RFC 9110 section 7.6.3: the protocol version this hop received the message in.
  std::string entry = received_version >= 11 ? "1.1 rebound" : "1.0 rebound";
  if (!token.empty()) {
    entry += " (";
    entry += token;
    entry += ')';
  }
  // Several Via lines are one list; folding them into one keeps their order.
  std::string via;
  for (auto const& h : f) {
    if (h.name() != bhttp::field::via) continue;
    if (!via.empty()) via += ", ";
    via += h.value();
  }
  if (!via.empty()) via += ", ";
  via += entry;
  f.set(bhttp::field::via, via);
}

bool forwardable_trailer(bhttp::field name, std::string_view name_string) {
  switch (name) {
    // framing, routing, authentication, request modifiers and response control data
    case bhttp::field::content_length:
    case bhttp::field::transfer_encoding:
    case bhttp::field::trailer:
    case bhttp::field::host:
    case bhttp::field::connection:
    case bhttp::field::keep_alive:
    case bhttp::field::proxy_connection:
    case bhttp::field::te:
    case bhttp::field::upgrade:
    case bhttp::field::authorization:
    case bhttp::field::proxy_authorization:
    case bhttp::field::proxy_authenticate:
    case bhttp::field::www_authenticate:
    case bhttp::field::cookie:
    case bhttp::field::set_cookie:
    case bhttp::field::content_type:
    case bhttp::field::content_encoding:
    case bhttp::field::content_range:
    case bhttp::field::cache_control:
    case bhttp::field::expect:
    case bhttp::field::max_forwards:
    case bhttp::field::pragma:
    case bhttp::field::range:
    case bhttp::field::age:
    case bhttp::field::expires:
    case bhttp::field::date:
    case bhttp::field::location:
    case bhttp::field::retry_after:
    case bhttp::field::vary:
    case bhttp::field::via:
      return false;
    default:
      break;
  }
  return !boost::beast::iequals(name_string.substr(0, 3), "if-");
}

}  // namespace rebound::http
