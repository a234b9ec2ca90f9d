#include "config/typed_values.hpp"

#include <boost/asio/ip/address.hpp>
#include <boost/url/parse.hpp>
#include <boost/url/url_view.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <limits>
#include <vector>

namespace rebound::config {
namespace {

/// Splits "250ms" into 250 and "ms"; false when there is no leading integer or it overflows.
bool split_number(std::string_view text, std::uint64_t& number, std::string_view& unit) {
  auto const* first = text.data();
  auto const* last = text.data() + text.size();
  auto [end, ec] = std::from_chars(first, last, number);
  if (ec != std::errc{} || end == first) return false;
  unit = std::string_view(end, static_cast<std::size_t>(last - end));
  return true;
}

std::string quoted(std::string_view s) { return "\"" + std::string(s) + "\""; }

}  // namespace

parsed<duration> parse_duration(std::string_view text) {
  auto const accepted = " (expected a whole number with a unit: ms, s, m, h or d, e.g. 250ms, 1s, 2m, 24h, 7d)";
  std::uint64_t n = 0;
  std::string_view unit;
  if (!split_number(text, n, unit)) return parsed<duration>::fail("invalid duration " + quoted(text) + accepted);
  std::uint64_t scale = 0;
  if (unit == "ms")
    scale = 1;
  else if (unit == "s")
    scale = 1000;
  else if (unit == "m")
    scale = 60'000;
  else if (unit == "h")
    scale = 3'600'000;
  else if (unit == "d")  // retention and R-6's windows are days
    scale = 86'400'000;
  else
    return parsed<duration>::fail("invalid duration " + quoted(text) + accepted);
  // A year is far beyond any sensible timeout and keeps every later addition of durations safe.
  constexpr std::uint64_t max_ms = 366ull * 24 * 3'600'000;
  if (n > max_ms / scale)
    return parsed<duration>::fail("duration " + quoted(text) + " is too large (at most 366 days)");
  return parsed<duration>::ok(duration(static_cast<duration::rep>(n * scale)));
}

parsed<std::uint64_t> parse_size(std::string_view text) {
  auto const accepted = " (expected a whole number of bytes, optionally with a unit: B, KiB, MiB, GiB, e.g. 512KiB)";
  std::uint64_t n = 0;
  std::string_view unit;
  if (!split_number(text, n, unit)) return parsed<std::uint64_t>::fail("invalid size " + quoted(text) + accepted);
  std::uint64_t scale = 0;
  if (unit.empty() || unit == "B")
    scale = 1;
  else if (unit == "KiB")
    scale = 1ull << 10;
  else if (unit == "MiB")
    scale = 1ull << 20;
  else if (unit == "GiB")
    scale = 1ull << 30;
  else
    return parsed<std::uint64_t>::fail("invalid size " + quoted(text) + accepted);
  if (n > std::numeric_limits<std::uint64_t>::max() / scale)
    return parsed<std::uint64_t>::fail("size " + quoted(text) + " is too large");
  return parsed<std::uint64_t>::ok(n * scale);
}

std::string format_duration(duration d) {
  auto const ms = static_cast<std::uint64_t>(d.count());
  if (ms != 0 && ms % 3'600'000 == 0) return std::to_string(ms / 3'600'000) + "h";
  if (ms != 0 && ms % 60'000 == 0) return std::to_string(ms / 60'000) + "m";
  if (ms != 0 && ms % 1000 == 0) return std::to_string(ms / 1000) + "s";
  return std::to_string(ms) + "ms";
}

std::string format_size(std::uint64_t bytes) {
  if (bytes != 0 && bytes % (1ull << 30) == 0) return std::to_string(bytes >> 30) + "GiB";
  if (bytes != 0 && bytes % (1ull << 20) == 0) return std::to_string(bytes >> 20) + "MiB";
  if (bytes != 0 && bytes % (1ull << 10) == 0) return std::to_string(bytes >> 10) + "KiB";
  return std::to_string(bytes) + "B";
}

parsed<endpoint> parse_endpoint(std::string_view text) {
  auto const accepted = " (expected IP:PORT, e.g. 127.0.0.1:3128 or [::1]:3128)";
  auto const colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0)
    return parsed<endpoint>::fail("invalid address " + quoted(text) + accepted);
  std::string_view host = text.substr(0, colon);
  std::string_view port_text = text.substr(colon + 1);
  bool const bracketed = host.size() >= 2 && host.front() == '[' && host.back() == ']';
  if (bracketed) host = host.substr(1, host.size() - 2);
  boost::system::error_code ec;
  auto const addr = boost::asio::ip::make_address(std::string(host), ec);
  if (ec || (addr.is_v6() && !bracketed)) return parsed<endpoint>::fail("invalid address " + quoted(text) + accepted);
  unsigned port = 0;
  auto [end, pec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (pec != std::errc{} || end != port_text.data() + port_text.size() || port_text.empty() || port > 65535)
    return parsed<endpoint>::fail("invalid port in " + quoted(text) + " (expected 0 to 65535)");
  return parsed<endpoint>::ok(endpoint{std::string(host), static_cast<std::uint16_t>(port)});
}

namespace {

/// `http[s]://authority` and what follows it, parsed by Boost.URL (RFC 3986); `what` names the
/// key in messages.
struct split_url {
  std::optional<origin_url> origin;
  std::string_view rest;  ///< from the first `/`, `?` or `#` after the authority
  std::string error;
};

split_url split_http_url(std::string_view text, std::string_view what, std::string_view accepted) {
  auto fail = [&](std::string why) { return split_url{std::nullopt, {}, why + std::string(accepted)}; };
  auto const r = boost::urls::parse_uri(text);
  if (!r) {
    if (!text.starts_with("http://") && !text.starts_with("https://"))
      return fail(std::string(what) + " " + quoted(text) + " is not an http:// or https:// URL");
    return fail(std::string(what) + " " + quoted(text) + " is not a valid URL (" + r.error().message() + ")");
  }
  auto const& u = *r;
  origin_url o;
  if (u.scheme_id() == boost::urls::scheme::https) {
    o.scheme = "https";
    o.port = 443;
  } else if (u.scheme_id() != boost::urls::scheme::http || !u.has_authority()) {
    return fail(std::string(what) + " " + quoted(text) + " is not an http:// or https:// URL");
  }
  if (u.has_userinfo())
    return split_url{std::nullopt,
                     {},
                     std::string(what) + " " + quoted(text) +
                         " carries credentials: they would show in /config and logs; use the auth key"};
  switch (u.host_type()) {
    case boost::urls::host_type::ipv6:
      o.host = u.host_ipv6_address().to_string();
      break;
    case boost::urls::host_type::ipv4:
    case boost::urls::host_type::name:
      o.host = std::string(u.encoded_host());
      break;
    default:  // IPvFuture, or none
      break;
  }
  // Names only as DNS knows them: no percent-encoding, nothing a resolver would refuse.
  bool const host_ok = !o.host.empty() && std::all_of(o.host.begin(), o.host.end(), [](char ch) {
    return std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '.' || ch == ':' || ch == '_';
  });
  if (!host_ok) return fail("invalid host in " + std::string(what) + " " + quoted(text));
  if (u.has_port()) {
    auto const port_text = u.port();
    unsigned port = 0;
    auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
    if (ec != std::errc{} || end != port_text.data() + port_text.size() || port == 0 || port > 65535)
      return fail("invalid port in " + std::string(what) + " " + quoted(text));
    o.port = static_cast<std::uint16_t>(port);
  }
  // What follows the authority: the path, query and fragment as written.
  return split_url{std::move(o), text.substr(u.encoded_origin().size()), {}};
}

}  // namespace

parsed<bool> parse_bool(std::string_view s) {
  if (s == "true") return parsed<bool>::ok(true);
  if (s == "false") return parsed<bool>::ok(false);
  return parsed<bool>::fail("invalid value " + quoted(s) + " (expected true or false)");
}

parsed<std::string> parse_header_name(std::string_view s) {
  auto const tchar = [](unsigned char c) {
    return std::isalnum(c) || std::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(c)) != std::string_view::npos;
  };
  if (s.empty() || !std::all_of(s.begin(), s.end(), tchar))
    return parsed<std::string>::fail("invalid header name " + quoted(s) +
                                     " (a field name: letters, digits and !#$%&'*+-.^_`|~)");
  return parsed<std::string>::ok(std::string(s));
}

parsed<origin_url> parse_origin(std::string_view text) {
  auto const accepted = " (expected http://host[:port] or https://host[:port], e.g. https://payments.example.com)";
  auto u = split_http_url(text, "origin", accepted);
  if (!u.origin) return parsed<origin_url>::fail(u.error);
  if (!u.rest.empty() && u.rest != "/")
    return parsed<origin_url>::fail("origin " + quoted(text) +
                                    " has a path, query or fragment; requests keep their own" + accepted);
  return parsed<origin_url>::ok(std::move(*u.origin));
}

parsed<service_url> parse_service_url(std::string_view text) {
  auto const accepted = " (expected an http:// or https:// URL, e.g. https://auth.example.com/oauth/token)";
  auto u = split_http_url(text, "URL", accepted);
  if (!u.origin) return parsed<service_url>::fail(u.error);
  if (u.rest.find('#') != std::string_view::npos)
    return parsed<service_url>::fail("URL " + quoted(text) + " has a fragment" + accepted);
  service_url out{std::move(*u.origin), u.rest.empty() ? "/" : std::string(u.rest)};
  if (out.target.front() == '?') out.target.insert(0, "/");
  return parsed<service_url>::ok(std::move(out));
}

std::string format_service_url(const service_url& u) {
  auto const default_port = u.origin.scheme == "https" ? 443 : 80;
  auto const host = u.origin.host.find(':') != std::string::npos ? "[" + u.origin.host + "]" : u.origin.host;
  return u.origin.scheme + "://" + host + (u.origin.port == default_port ? "" : ":" + std::to_string(u.origin.port)) +
         u.target;
}

std::string format_origin(const origin_url& o) {
  auto const host = o.host.find(':') != std::string::npos ? "[" + o.host + "]" : o.host;
  return o.scheme + "://" + host + ":" + std::to_string(o.port);
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t const up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

parsed<context_kind> parse_context(std::string_view s) {
  if (s == "sync") return parsed<context_kind>::ok(context_kind::sync);
  if (s == "async") return parsed<context_kind>::ok(context_kind::async);
  if (s == "webhook") return parsed<context_kind>::ok(context_kind::webhook);
  if (s == "batch") return parsed<context_kind>::ok(context_kind::batch);
  if (s == "grpc") return parsed<context_kind>::ok(context_kind::grpc);
  return parsed<context_kind>::fail("invalid context \"" + std::string(s) +
                                    "\" (expected sync, async, webhook, batch or grpc)");
}

parsed<jitter_kind> parse_jitter(std::string_view s) {
  if (s == "full") return parsed<jitter_kind>::ok(jitter_kind::full);
  if (s == "decorrelated") return parsed<jitter_kind>::ok(jitter_kind::decorrelated);
  if (s == "equal" || s == "none")
    return parsed<jitter_kind>::fail("jitter \"" + std::string(s) +
                                     "\" is not allowed: equal jitter and fixed intervals make clients retry in step "
                                     "(expected full or decorrelated)");
  return parsed<jitter_kind>::fail("invalid jitter \"" + std::string(s) + "\" (expected full or decorrelated)");
}

parsed<unsigned> parse_max_retries(std::string_view s) {
  unsigned v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || end != s.data() + s.size() || v > 100)
    return parsed<unsigned>::fail("invalid max_retries \"" + std::string(s) + "\" (expected a whole number)");
  return parsed<unsigned>::ok(v);
}

/// A plain decimal between 0 and 1 (`0.2`, `1`).
parsed<double> parse_ratio(std::string_view s) {
  double v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v, std::chars_format::fixed);
  if (ec != std::errc{} || end != s.data() + s.size() || !(v >= 0 && v <= 1))
    return parsed<double>::fail("invalid ratio \"" + std::string(s) + "\" (expected a number from 0 to 1, e.g. 0.2)");
  return parsed<double>::ok(v);
}

parsed<unsigned> parse_count(std::string_view s) {
  unsigned v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || end != s.data() + s.size() || v > 1000000)
    return parsed<unsigned>::fail("invalid count \"" + std::string(s) + "\" (expected a whole number up to 1000000)");
  return parsed<unsigned>::ok(v);
}

parsed<breaker_mode> parse_breaker_mode(std::string_view s) {
  if (s == "enforce") return parsed<breaker_mode>::ok(breaker_mode::enforce);
  if (s == "signal") return parsed<breaker_mode>::ok(breaker_mode::signal);
  if (s == "off") return parsed<breaker_mode>::ok(breaker_mode::off);
  return parsed<breaker_mode>::fail("invalid mode \"" + std::string(s) + "\" (expected enforce, signal or off)");
}

parsed<unsigned> parse_workers(std::string_view s) {
  unsigned v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || end != s.data() + s.size() || v > 256)
    return parsed<unsigned>::fail("invalid workers \"" + std::string(s) +
                                  "\" (expected 0 for one per core, or 1 to 256)");
  return parsed<unsigned>::ok(v);
}

/// The metrics' `service` label: a name, not free text, so dashboards can select on it.
parsed<std::string> parse_service(std::string_view s) {
  bool const ok = !s.empty() && s.size() <= 128 && std::all_of(s.begin(), s.end(), [](char ch) {
    return std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' || ch == '.';
  });
  if (ok) return parsed<std::string>::ok(std::string(s));
  return parsed<std::string>::fail("invalid value \"" + std::string(s) +
                                   "\" (expected 1..128 letters, digits, '-', '_' or '.')");
}

parsed<std::string> parse_log_level(std::string_view s) {
  for (auto const* l : {"trace", "debug", "info", "warn", "error", "off"})
    if (s == l) return parsed<std::string>::ok(std::string(s));
  return parsed<std::string>::fail("invalid value \"" + std::string(s) +
                                   "\" (expected trace, debug, info, warn, error or off)");
}

parsed<unknown_hosts_policy> parse_unknown_hosts(std::string_view s) {
  if (s == "allow") return parsed<unknown_hosts_policy>::ok(unknown_hosts_policy::allow);
  if (s == "deny") return parsed<unknown_hosts_policy>::ok(unknown_hosts_policy::deny);
  return parsed<unknown_hosts_policy>::fail("invalid value \"" + std::string(s) + "\" (expected allow or deny)");
}

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

}  // namespace rebound::config
