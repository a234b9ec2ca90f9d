#include "proxy/plan/request_target.hpp"

#include "proxy/upstream/tls_client.hpp"

#include <boost/url/parse.hpp>
#include <boost/url/url_view.hpp>
#include <boost/url/authority_view.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>

namespace rebound::plan {
namespace {

/// ASCII only, as host names and schemes are: no locale lookup per character.
char lower_char(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; }

void assign_lower(std::string& out, std::string_view s) {
  out.assign(s);
  for (auto& c : out) c = lower_char(c);
}

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-';
}

/// Boost.URL accepts any digits as a port and wraps above 65535, so the text is checked here.
bool parse_port(std::string_view text, std::uint16_t& port) {
  if (text.empty() || text.size() > 5) return false;
  unsigned v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc{} || end != text.data() + text.size() || v == 0 || v > 65535) return false;
  port = static_cast<std::uint16_t>(v);
  return true;
}

/** Whether a registered name ends in a number (`2130706433`, `127.1`, `0x7f.1`): the
    resolver would read it as an IPv4 address in a legacy form (inet_aton), so the name an
    allow-list or a log shows would not be where rebound connects. Such hosts are refused
    (the WHATWG URL standard's "ends in a number" test). A valid dotted quad is an IPv4
    host to Boost.URL and never gets here. */
bool ends_in_a_number(std::string_view host) {
  if (!host.empty() && host.back() == '.') host.remove_suffix(1);
  auto const last = host.substr(host.rfind('.') == std::string_view::npos ? 0 : host.rfind('.') + 1);
  if (last.empty()) return false;
  if (std::all_of(last.begin(), last.end(), [](unsigned char c) { return std::isdigit(c); })) return true;
  return last.size() >= 2 && last[0] == '0' && (last[1] == 'x' || last[1] == 'X') &&
         std::all_of(last.begin() + 2, last.end(), [](unsigned char c) { return std::isxdigit(c); });
}

/// The Host value to send: the host, and the port unless it is the scheme's default.
void set_authority(request_target& t, std::uint16_t default_port, bool port_required) {
  t.authority = t.host;
  if (t.port == default_port && !port_required) return;
  char port[6];
  auto const end = std::to_chars(port, port + sizeof port, t.port).ptr;
  t.authority.append(":").append(port, end);
}

/** The Host most origin-form requests carry: a name of letters, digits, dots and hyphens,
    with or without a port. Every such value is a registered name to Boost.URL too, and
    comes out of fill_authority the same; this is a walk of its characters instead of a
    parse that cost ~1,100 instructions of every Host-routed request (bench/instructions.sh).
    False for anything else (an IP literal, another character, a name that ends in a number,
    a bad port), which takes the full parse and its error message. */
bool fill_plain_host(std::string_view text, std::uint16_t default_port, request_target& t) {
  auto const colon = text.find(':');
  auto const host = text.substr(0, colon);
  if (host.empty() || !std::all_of(host.begin(), host.end(), is_name_char)) return false;
  if (ends_in_a_number(host)) return false;
  t.port = default_port;
  if (colon != std::string_view::npos && colon + 1 < text.size() && !parse_port(text.substr(colon + 1), t.port))
    return false;
  assign_lower(t.host, host);
  t.connect_host = t.host;
  set_authority(t, default_port, false);
  return true;
}

/** Fills host, connect_host, port and authority from an authority component. The default
    port applies when the authority has none; an empty port (`host:`) counts as none. */
std::optional<std::string> fill_authority(const boost::urls::authority_view& a, std::uint16_t default_port,
                                          bool port_required, request_target& t) {
  if (a.has_userinfo()) return "userinfo (user@) in the request target is not allowed";
  auto const host = a.encoded_host_address();
  if (host.empty()) return "the request target has no host";
  if (a.host_type() == boost::urls::host_type::ipv6) {
    t.connect_host = std::string(host);
    t.host = "[" + t.connect_host + "]";
  } else if (a.host_type() == boost::urls::host_type::ipvfuture) {
    return "IPvFuture hosts are not supported";
  } else {
    if (host.find('%') != std::string_view::npos) return "percent-encoded host names are not supported";
    if (a.host_type() == boost::urls::host_type::name && ends_in_a_number(host))
      return "host \"" + std::string(host) + "\" is a number but not a dotted-quad IPv4 address";
    assign_lower(t.host, host);
    t.connect_host = t.host;
  }
  t.port = default_port;
  if (a.has_port() && !a.port().empty()) {
    if (!parse_port(a.port(), t.port)) return "invalid port \"" + std::string(a.port()) + "\" (expected 1 to 65535)";
  } else if (port_required) {
    return "CONNECT needs host:port";
  }
  set_authority(t, default_port, port_required);
  return std::nullopt;
}

}  // namespace

std::optional<std::string> parse_request_target(request_target& t, std::string_view method, std::string_view target,
                                                std::string_view host_header, std::size_t host_count,
                                                unsigned version) {
  using fail = std::string;
  if (target.empty()) return fail("empty request target");
  if (target.front() == '/' || target == "*") {
    // Origin form: the Host header names the upstream (RFC 9112 section 3.2.3).
    if (target == "*" && method != "OPTIONS") return fail("asterisk-form is only valid for OPTIONS");
    // Beast's request-line parser already refuses these; this parser promises the same to
    // any caller, since the target is written verbatim into the upstream's request line.
    for (unsigned char c : target)
      if (c <= 0x20 || c == 0x7f) return fail("request target contains a space or control character");
    if (host_count > 1) return fail("more than one Host header");
    if (host_count == 0) {
      return fail(version >= 11 ? "missing Host header"
                                : "origin-form request without a Host header: send an absolute URI");
    }
    if (!fill_plain_host(host_header, 80, t)) {
      auto a = boost::urls::parse_authority(host_header);
      if (!a) return fail("invalid Host header \"" + std::string(host_header) + "\"");
      if (auto err = fill_authority(*a, 80, false, t)) return err;
    }
    t.origin_form.assign(target);
    return std::nullopt;
  }
  // Absolute form (RFC 9112 section 3.2.2): the target wins over any Host header.
  auto u = boost::urls::parse_absolute_uri(target);
  if (!u) return fail("invalid request target (expected an absolute URI like http://host/path or an origin-form path)");
  assign_lower(t.scheme, u->scheme());
  if (t.scheme != "http" && t.scheme != "https") return fail("unsupported scheme \"" + t.scheme + "\" (expected http)");
  if (!u->has_authority()) return fail("the request target has no authority");
  if (host_count > 1) return fail("more than one Host header");
  if (auto err = fill_authority(u->authority(), t.scheme == "https" ? 443 : 80, false, t)) return err;
  auto const path = u->encoded_path();
  // After an authority the path is empty or starts with "/" (RFC 3986 path-abempty), but
  // Boost.URL 1.81 reads "http://svc:8x/" as port 8 and path "x/", which would go out as
  // the request line "GET x/" to port 8.
  if (!path.empty() && path.front() != '/')
    return fail("invalid request target (the authority is followed by \"" + std::string(path.substr(0, 32)) + "\")");
  if (path.empty())
    t.origin_form = method == "OPTIONS" && !u->has_query() ? "*" : "/";
  else
    t.origin_form = std::string(path);
  if (u->has_query()) {
    t.origin_form += '?';
    t.origin_form += std::string_view(u->encoded_query());
  }
  return std::nullopt;
}

target_result parse_request_target(std::string_view method, std::string_view target, std::string_view host_header,
                                   std::size_t host_count, unsigned version) {
  request_target t;
  if (auto error = parse_request_target(t, method, target, host_header, host_count, version))
    return target_result{std::nullopt, std::move(*error)};
  return target_result{std::move(t), {}};
}

target_result parse_connect_target(std::string_view target) {
  auto const fail = [](std::string error) { return target_result{std::nullopt, std::move(error)}; };
  auto a = boost::urls::parse_authority(target);
  if (!a) return fail("invalid CONNECT target \"" + std::string(target) + "\" (expected host:port)");
  request_target t;
  t.scheme = "tcp";
  if (auto err = fill_authority(*a, 0, true, t)) return fail(std::move(*err));
  return target_result{std::move(t), {}};
}

std::string pool_key(const request_target& t, const upstream::tls_client* tls) {
  // Sized once: built with operator+ it took three allocations on every request.
  auto const port = std::to_string(t.port);
  std::string key;
  key.reserve(t.scheme.size() + 3 + t.connect_host.size() + 1 + port.size() + (tls ? 1 + tls->identity().size() : 0));
  key.append(t.scheme).append("://").append(t.connect_host).append(":").append(port);
  if (tls) key.append("#").append(tls->identity());
  return key;
}

}  // namespace rebound::plan
