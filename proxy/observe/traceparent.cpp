#include "proxy/observe/traceparent.hpp"

namespace rebound::observe {
namespace {

template <std::size_t N>
bool read_hex(std::string_view s, std::array<std::uint8_t, N>& out) {
  if (s.size() != 2 * N) return false;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;  // upper case is invalid in a traceparent
  };
  bool any = false;
  for (std::size_t i = 0; i < N; ++i) {
    int const hi = nibble(s[2 * i]), lo = nibble(s[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<std::uint8_t>(hi << 4 | lo);
    any = any || out[i] != 0;
  }
  return any;  // an all-zero id is invalid
}

}  // namespace

std::string hex(const std::uint8_t* bytes, std::size_t n) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (std::size_t i = 0; i < n; ++i) {
    out[2 * i] = digits[bytes[i] >> 4];
    out[2 * i + 1] = digits[bytes[i] & 15];
  }
  return out;
}

std::optional<trace_parent> parse_traceparent(std::string_view v) {
  // version "-" trace-id "-" parent-id "-" flags: 2 + 1 + 32 + 1 + 16 + 1 + 2 = 55
  if (v.size() < 55 || v[2] != '-' || v[35] != '-' || v[52] != '-') return std::nullopt;
  std::array<std::uint8_t, 1> version{};
  std::array<std::uint8_t, 1> flags{};
  auto const ver = v.substr(0, 2);
  if (ver == "ff" || (!read_hex(ver, version) && ver != "00")) return std::nullopt;
  if (ver == "00" && v.size() != 55) return std::nullopt;
  if (ver != "00" && v.size() > 55 && v[55] != '-') return std::nullopt;
  trace_parent p;
  if (!read_hex(v.substr(3, 32), p.trace) || !read_hex(v.substr(36, 16), p.parent)) return std::nullopt;
  if (!read_hex(v.substr(53, 2), flags) && v.substr(53, 2) != "00") return std::nullopt;
  p.sampled = (flags[0] & 1) != 0;
  return p;
}

std::string format_traceparent(const trace_id& trace, const span_id& span, bool sampled) {
  return "00-" + hex(trace.data(), trace.size()) + "-" + hex(span.data(), span.size()) + (sampled ? "-01" : "-00");
}

}  // namespace rebound::observe
