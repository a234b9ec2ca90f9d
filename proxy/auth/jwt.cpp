#include "proxy/auth/jwt.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>

#include <cmath>

namespace rebound::auth {
namespace {

int sextet(char c, bool url) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == (url ? '-' : '+')) return 62;
  if (c == (url ? '_' : '/')) return 63;
  return -1;
}

}  // namespace

std::optional<std::string> base64url_decode(std::string_view in) {
  while (!in.empty() && in.back() == '=') in.remove_suffix(1);
  if (in.size() % 4 == 1) return std::nullopt;
  std::string out;
  out.reserve(in.size() * 3 / 4);
  unsigned acc = 0;
  int bits = 0;
  for (char c : in) {
    int const v = sextet(c, true);
    if (v < 0) return std::nullopt;
    acc = (acc << 6) | static_cast<unsigned>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  return out;
}

std::string base64_encode(std::string_view in) {
  static constexpr char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    unsigned const n = (static_cast<unsigned char>(in[i]) << 16) | (static_cast<unsigned char>(in[i + 1]) << 8) |
                       static_cast<unsigned char>(in[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out.push_back(alphabet[(n >> s) & 63]);
  }
  if (auto const rest = in.size() - i; rest > 0) {
    unsigned n = static_cast<unsigned char>(in[i]) << 16;
    if (rest == 2) n |= static_cast<unsigned char>(in[i + 1]) << 8;
    out.push_back(alphabet[(n >> 18) & 63]);
    out.push_back(alphabet[(n >> 12) & 63]);
    out.push_back(rest == 2 ? alphabet[(n >> 6) & 63] : '=');
    out.push_back('=');
  }
  return out;
}

std::optional<wall_clock::time_point> jwt_expiry(std::string_view token) {
  auto const first = token.find('.');
  if (first == std::string_view::npos) return std::nullopt;
  auto const second = token.find('.', first + 1);
  if (second == std::string_view::npos) return std::nullopt;
  auto const payload = base64url_decode(token.substr(first + 1, second - first - 1));
  if (!payload) return std::nullopt;
  boost::system::error_code ec;
  auto const claims = boost::json::parse(*payload, ec);
  if (ec || !claims.is_object()) return std::nullopt;
  auto const* exp = claims.as_object().if_contains("exp");
  if (!exp) return std::nullopt;
  double seconds = 0;
  if (exp->is_int64())
    seconds = static_cast<double>(exp->as_int64());
  else if (exp->is_uint64())
    seconds = static_cast<double>(exp->as_uint64());
  else if (exp->is_double())
    seconds = exp->as_double();
  else
    return std::nullopt;
  // The clock counts nanoseconds in 64 bits, up to the year 2262: a later exp is no date
  // rebound can hold (and converting it would overflow).
  if (!std::isfinite(seconds) || seconds < 0 || seconds > 9e9) return std::nullopt;
  return wall_clock::time_point(
      std::chrono::duration_cast<wall_clock::duration>(std::chrono::duration<double>(seconds)));
}

std::string_view bearer_token(std::string_view authorization) {
  if (authorization.size() < 7) return {};
  auto const scheme = authorization.substr(0, 7);
  for (std::size_t i = 0; i < 6; ++i)
    if (std::tolower(static_cast<unsigned char>(scheme[i])) != "bearer"[i]) return {};
  if (scheme[6] != ' ') return {};
  auto token = authorization.substr(7);
  while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
  while (!token.empty() && token.back() == ' ') token.remove_suffix(1);
  return token;
}

}  // namespace rebound::auth
