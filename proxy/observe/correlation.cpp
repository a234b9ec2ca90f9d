#include "proxy/observe/correlation.hpp"

#include "proxy/observe/traceparent.hpp"

#include <algorithm>
#include <array>

namespace rebound::observe {

bool usable_correlation_id(std::string_view value) {
  return !value.empty() && value.size() <= max_correlation_id &&
         std::all_of(value.begin(), value.end(), [](char c) { return c > 0x20 && c < 0x7f; });
}

std::string_view trace_id_of(std::string_view tp) {
  // The tracer's parser (observe/trace.hpp), so the correlation id in the log and the span and
  // the trace the upstream sees are always one: a traceparent it refuses (an all-zero parent id,
  // say) starts a new trace, and its id is not the caller's.
  if (!parse_traceparent(tp)) return {};
  return tp.substr(3, 32);
}

std::string_view correlation_id_of(const correlation_fields& f) {
  for (auto const v : {f.request_id, f.correlation_id})
    if (usable_correlation_id(v)) return v;
  return trace_id_of(f.traceparent);
}

namespace {
/// Each byte's two hex digits: a request without an id gets 32 of them, a byte at a time.
constexpr auto hex_pairs = [] {
  constexpr char digits[] = "0123456789abcdef";
  std::array<std::array<char, 2>, 256> t{};
  for (std::size_t b = 0; b < 256; ++b) t[b] = {digits[b >> 4], digits[b & 0xf]};
  return t;
}();
}  // namespace

made_correlation_id new_correlation_id(std::mt19937_64& rng) {
  made_correlation_id id;
  for (std::size_t half = 0; half < 2; ++half) {
    auto bits = rng();
    for (std::size_t i = 0; i < 8; ++i, bits >>= 8) {
      auto const& pair = hex_pairs[bits & 0xff];
      id.digits[half * 16 + 2 * i] = pair[0];
      id.digits[half * 16 + 2 * i + 1] = pair[1];
    }
  }
  return id;
}

}  // namespace rebound::observe
