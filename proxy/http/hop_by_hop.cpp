#include "proxy/http/hop_by_hop.hpp"

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
  for (auto name : {bhttp::field::connection, bhttp::field::proxy_connection, bhttp::field::keep_alive, bhttp::field::te,
                    bhttp::field::trailer, bhttp::field::transfer_encoding, bhttp::field::upgrade,
                    bhttp::field::proxy_authorization, bhttp::field::proxy_authenticate}) {
    f.erase(name);
  }
}

void add_via(bhttp::fields& f) {
  // Several Via lines are one list; folding them into one keeps their order.
  std::string via;
  for (auto const& h : f) {
    if (h.name() != bhttp::field::via) continue;
    if (!via.empty()) via += ", ";
    via += h.value();
  }
  if (via.empty()) {
    f.set(bhttp::field::via, "1.1 rebound");
    return;
  }
  via += ", 1.1 rebound";
  f.set(bhttp::field::via, via);
}

}  // namespace rebound::http
