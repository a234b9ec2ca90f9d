#include "proxy/retry/request_timeout.hpp"

#include "proxy/retry/field_value.hpp"

#include <cstdint>

namespace rebound::retry {
namespace {

bool all_digits(std::string_view v) {
  if (v.empty()) return false;
  for (char c : v)
    if (c < '0' || c > '9') return false;
  return true;
}

/// Digits times `scale`, saturating at max_request_timeout: twenty digits must not wrap.
std::int64_t saturating(std::string_view digits, std::int64_t scale) {
  std::int64_t const cap = max_request_timeout.count();
  std::int64_t n = 0;
  for (char c : digits) {
    n = n * 10 + (c - '0');
    if (n * scale >= cap) return cap;  // n <= cap here, so n * 10 + 9 stays far from overflow
  }
  return n * scale;
}

std::string quoted(std::string_view v) {
  // The value is the caller's: keep the message short and printable.
  std::string out = "\"";
  for (char c : v.substr(0, 32)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  if (v.size() > 32) out += "...";
  return out + "\"";
}

}  // namespace

std::variant<std::chrono::milliseconds, malformed_timeout> parse_request_timeout(std::string_view value) {
  using std::chrono::milliseconds;
  auto const v = trim_ows(value);
  auto const bad = [&] {
    return malformed_timeout{std::string(request_timeout_header) + " " + quoted(value) +
                             " is not a timeout: expected seconds (2, 1.5) or milliseconds (250ms)"};
  };
  if (v.size() > 2 && v.substr(v.size() - 2) == "ms") {
    auto const digits = v.substr(0, v.size() - 2);
    if (!all_digits(digits)) return bad();
    return milliseconds(saturating(digits, 1));
  }
  auto const dot = v.find('.');
  auto const whole = v.substr(0, dot);
  if (!all_digits(whole)) return bad();
  std::int64_t ms = saturating(whole, 1000);
  if (dot != std::string_view::npos) {
    auto const fraction = v.substr(dot + 1);
    if (!all_digits(fraction)) return bad();
    std::int64_t scale = 100;
    for (std::size_t i = 0; i < fraction.size() && i < 3; ++i, scale /= 10) ms += (fraction[i] - '0') * scale;
    if (ms > max_request_timeout.count()) ms = max_request_timeout.count();
  }
  return milliseconds(ms);
}

std::string format_request_timeout(std::chrono::steady_clock::time_point deadline,
                                   std::chrono::steady_clock::time_point now) {
  auto const left = std::chrono::floor<std::chrono::milliseconds>(deadline - now).count();
  return std::to_string(left > 0 ? left : 0) + "ms";
}

}  // namespace rebound::retry
