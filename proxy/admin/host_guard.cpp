#include "proxy/admin/host_guard.hpp"

#include "config/config.hpp"
#include "config/typed_values.hpp"

#include <boost/asio/ip/address.hpp>
#include <boost/beast/core/string.hpp>

#include <algorithm>
#include <cctype>

namespace rebound::admin {
namespace {

namespace bhttp = boost::beast::http;

/// The host part of a Host value (no port, no brackets, lower case, no trailing dot); nullopt when
/// it is not `host[:port]`.
std::optional<std::string> host_part(std::string_view host, bool& bracketed) {
  std::string_view name = host;
  std::string_view port;
  bracketed = !host.empty() && host.front() == '[';
  if (bracketed) {
    auto const close = host.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    name = host.substr(1, close - 1);
    auto rest = host.substr(close + 1);
    if (!rest.empty() && rest.front() != ':') return std::nullopt;
    if (!rest.empty()) port = rest.substr(1);
  } else if (auto const colon = host.find(':'); colon != std::string_view::npos) {
    name = host.substr(0, colon);
    port = host.substr(colon + 1);
    if (port.find(':') != std::string_view::npos) return std::nullopt;
  }
  if (name.empty() || port.size() > 5 || !std::all_of(port.begin(), port.end(), [](unsigned char c) {
        return std::isdigit(c);
      }))
    return std::nullopt;
  auto out = config::lower(name);
  if (!bracketed && out.back() == '.') out.pop_back();
  return out;
}

bool is_ip_literal(const std::string& name, bool bracketed) {
  boost::system::error_code ec;
  if (bracketed) {
    (void)boost::asio::ip::make_address_v6(name, ec);
    return !ec;
  }
  (void)boost::asio::ip::make_address_v4(name, ec);
  return !ec;
}

}  // namespace

bool admin_host_allowed(std::string_view host, const config::config& cfg) {
  bool bracketed = false;
  auto const name = host_part(host, bracketed);
  if (!name) return false;
  if (is_ip_literal(*name, bracketed)) return true;
  if (bracketed) return false;
  if (*name == "localhost" || name->ends_with(".localhost")) return true;
  if (*name == config::lower(cfg.admin.host)) return true;
  return std::any_of(cfg.admin_allowed_hosts.begin(), cfg.admin_allowed_hosts.end(), [&](const std::string& allowed) {
    if (allowed.starts_with('.')) return name->ends_with(allowed) || *name == allowed.substr(1);
    return *name == allowed;
  });
}

std::optional<std::string> foreign_request(const http::request_head& req,
                                           const config::config& cfg) {
  auto const hosts = req.count(bhttp::field::host);
  if (hosts > 1) return "more than one Host field";
  auto const host = req.find(bhttp::field::host);
  if (host != req.end() && !admin_host_allowed(host->value(), cfg))
    return "Host \"" + std::string(host->value()) +
           "\" does not name the admin API (an IP address, localhost, or a name in admin.allowed_hosts)";
  bool const read = req.method() == bhttp::verb::get || req.method() == bhttp::verb::head;
  if (read) return std::nullopt;
  // A browser sends Origin with every write it makes for a page: a page of another origin (a
  // form on any site the operator visits, another local service) is refused, token or not, so
  // the admin page's own writes are the only ones a browser can make.
  auto const origins = req.count(bhttp::field::origin);
  if (origins == 0) return std::nullopt;
  std::string_view const o = req.find(bhttp::field::origin)->value();
  auto const scheme_end = o.find("://");
  if (origins > 1 || host == req.end() || scheme_end == std::string_view::npos ||
      !boost::beast::iequals(o.substr(scheme_end + 3), host->value()))
    return "a write from a page of another origin (" + std::string(o) + ") is refused";
  return std::nullopt;
}

}  // namespace rebound::admin
