/** The `dns:` keys (issue 50): the servers rebound asks and how long it keeps what they say. */
#include "config/schema_reader.hpp"
#include "config/typed_values.hpp"

#include <boost/asio/ip/address.hpp>

namespace rebound::config {

namespace {

/// `10.0.0.2`, `10.0.0.2:5353`, `[fd00::2]:53` (a bare IPv6 address too), as c-ares's server
/// list writes them: IPv6 in brackets, the port always given.
parsed<std::string> parse_dns_server(std::string_view text) {
  boost::system::error_code ec;
  auto const bare = boost::asio::ip::make_address(std::string(text), ec);
  if (!ec) return parsed<std::string>::ok(bare.is_v6() ? "[" + bare.to_string() + "]:53" : bare.to_string() + ":53");
  auto const ep = parse_endpoint(text);
  if (!ep.value || ep.value->port == 0)
    return parsed<std::string>::fail("invalid DNS server \"" + std::string(text) + "\"" +
                                     " (expected an IP address, with :PORT when not 53: 10.0.0.2, 127.0.0.1:5353, "
                                     "[fd00::2]:53)");
  auto const addr = boost::asio::ip::make_address(ep.value->host);
  auto const host = addr.is_v6() ? "[" + addr.to_string() + "]" : addr.to_string();
  return parsed<std::string>::ok(host + ":" + std::to_string(ep.value->port));
}

}  // namespace

void reader::read_dns(const YAML::Node& n, dns_settings& d) {
  if (!expect_map(n, "dns")) return;
  check_keys(n, "dns", {"servers", "min_ttl", "max_ttl", "stale_for", "timeout", "connect_stagger"});
  if (auto s = n["servers"]) {
    if (!s.IsSequence()) {  // empty: /etc/resolv.conf's, as when left out
      error(s, "dns.servers", "expected a list of DNS server addresses (10.0.0.2, 127.0.0.1:5353)");
    } else {
      for (std::size_t i = 0; i < s.size(); ++i) {
        auto const path = "dns.servers[" + std::to_string(i) + "]";
        auto const text = scalar(s[i], path);
        if (!text) continue;
        auto const server = parse_dns_server(*text);
        if (!server.value)
          error(s[i], path, server.error);
        else
          d.servers.push_back(*server.value);
      }
    }
  }
  auto const between = [&](const char* key, duration& out, duration lo, duration hi, const char* range) {
    typed(n, key, "dns", out, parse_duration);
    if (n[key] && (out < lo || out > hi)) error(n[key], join("dns", key), std::string("must be between ") + range);
  };
  using namespace std::chrono_literals;
  between("min_ttl", d.min_ttl, 0ms, 1h, "0s and 1h");
  between("max_ttl", d.max_ttl, 1s, 24h, "1s and 24h");
  between("stale_for", d.stale_for, 0ms, 24h, "0s and 24h");
  between("timeout", d.timeout, 100ms, 1min, "100ms and 1m");
  between("connect_stagger", d.connect_stagger, 10ms, 10s, "10ms and 10s");
  if (d.min_ttl > d.max_ttl)
    error(n["min_ttl"] ? n["min_ttl"] : n["max_ttl"], "dns.min_ttl",
          "must not exceed dns.max_ttl (" + format_duration(d.max_ttl) + ")");
}

}  // namespace rebound::config
