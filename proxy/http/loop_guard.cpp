#include "proxy/http/loop_guard.hpp"

#include <boost/asio/ip/address.hpp>
#include <boost/beast/core/string.hpp>

#include <random>

namespace rebound::http {

std::string new_instance_token() {
  std::random_device rd;
  static constexpr char hex[] = "0123456789abcdef";
  std::string out(8, '0');
  auto v = rd();
  for (auto& c : out) {
    c = hex[v & 0xf];
    v >>= 4;
  }
  return out;
}

bool via_names_instance(const boost::beast::http::fields& f, std::string_view token) {
  if (token.empty()) return false;
  std::string const mark = "rebound (" + std::string(token) + ")";
  for (auto const& h : f) {
    if (h.name() != boost::beast::http::field::via) continue;
    if (std::string_view(h.value().data(), h.value().size()).find(mark) != std::string_view::npos) return true;
  }
  return false;
}

bool targets_listener(std::string_view connect_host, std::uint16_t port, const config::endpoint& listen) {
  if (port != listen.port) return false;
  boost::system::error_code ec;
  auto const own = boost::asio::ip::make_address(listen.host, ec);
  if (ec) return false;
  if (boost::beast::iequals(connect_host, "localhost") || boost::beast::iequals(connect_host, "localhost."))
    return own.is_loopback() || own.is_unspecified();
  auto const target = boost::asio::ip::make_address(std::string(connect_host), ec);
  if (ec) return false;  // a name: the Via check catches it one hop later
  if (own.is_unspecified()) return target.is_loopback() || target.is_unspecified();
  return target == own;
}

}  // namespace rebound::http
