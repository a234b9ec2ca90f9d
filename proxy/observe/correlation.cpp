#include "proxy/observe/correlation.hpp"

#include <algorithm>

namespace rebound::observe {
namespace {

bool lower_hex(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

}  // namespace

bool usable_correlation_id(std::string_view value) {
  return !value.empty() && value.size() <= max_correlation_id &&
         std::all_of(value.begin(), value.end(), [](char c) { return c > 0x20 && c < 0x7f; });
}

std::string_view trace_id_of(std::string_view tp) {
  // version "00" is 55 characters; later versions may append fields after another '-'.
  if (tp.size() < 55 || tp[2] != '-' || tp[35] != '-' || tp[52] != '-') return {};
  if (tp.size() > 55 && tp[55] != '-') return {};
  auto const version = tp.substr(0, 2);
  auto const trace = tp.substr(3, 32);
  if (!lower_hex(version) || version == "ff" || !lower_hex(trace) || !lower_hex(tp.substr(36, 16)) ||
      !lower_hex(tp.substr(53, 2)))
    return {};
  if (trace.find_first_not_of('0') == std::string_view::npos) return {};
  return trace;
}

std::string_view correlation_id_of(const correlation_fields& f) {
  for (auto const v : {f.request_id, f.correlation_id})
    if (usable_correlation_id(v)) return v;
  return trace_id_of(f.traceparent);
}

std::string new_correlation_id(std::mt19937_64& rng) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string id(32, '0');
  for (int half = 0; half < 2; ++half) {
    auto bits = rng();
    for (int i = 0; i < 16; ++i, bits >>= 4) id[half * 16 + i] = digits[bits & 0xf];
  }
  return id;
}

}  // namespace rebound::observe
