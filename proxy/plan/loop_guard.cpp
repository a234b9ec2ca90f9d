#include "proxy/plan/loop_guard.hpp"

#include <boost/asio/ip/address.hpp>
#include <boost/beast/core/string.hpp>

#include <random>

namespace rebound::plan {

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

std::string via_mark(std::string_view token) { return "rebound (" + std::string(token) + ")"; }

bool via_value_names_instance(std::string_view via, std::string_view token) {
  return !token.empty() && via.find(via_mark(token)) != std::string_view::npos;
}

bool via_names_instance(const http::head_fields& f, std::string_view token) {
  for (auto const& h : f)
    if (h.name() == boost::beast::http::field::via &&
        via_value_names_instance(std::string_view(h.value().data(), h.value().size()), token))
      return true;
  return false;
}

std::optional<http::error_reply> refuse_loop(const request_target& t, bool passed_here, const config::endpoint& listen) {
  if (!passed_here && !targets_listener(t.connect_host, t.port, listen)) return std::nullopt;
  return http::error_reply{508,
                     http::error_type::loop_detected,
                     "forwarding loop: the request targets this rebound (" + t.connect_host + ":" +
                         std::to_string(t.port) + ") or already passed through it",
                     {},
                     0};
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

}  // namespace rebound::plan
