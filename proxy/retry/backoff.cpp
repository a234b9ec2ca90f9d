#include "proxy/retry/backoff.hpp"

#include <algorithm>

namespace rebound::retry {
namespace {

duration scale(duration span, double u) {
  u = std::clamp(u, 0.0, 1.0);
  auto const v = static_cast<duration::rep>(static_cast<double>(span.count()) * u);
  return duration(std::min(v, span.count()));
}

}  // namespace

duration full_jitter(unsigned retry_number, duration base, duration cap, double u) {
  if (retry_number == 0 || base.count() <= 0 || cap.count() <= 0) return duration(0);
  duration ceiling = std::min(base, cap);
  for (unsigned i = 1; i < retry_number && ceiling < cap; ++i) ceiling = std::min(cap, ceiling * 2);
  return scale(ceiling, u);
}

duration decorrelated_jitter(duration previous, duration base, duration cap, double u) {
  if (cap.count() <= 0) return duration(0);
  auto const low = std::min(base, cap);
  auto const high = std::max(low, std::min(cap, std::max(previous, base) * 3));
  return low + scale(high - low, u);
}

duration scheduled_jitter(const std::vector<duration>& steps, unsigned retry_number, double u) {
  if (steps.empty() || retry_number == 0) return duration(0);
  auto const k = std::min<std::size_t>(retry_number, steps.size());
  auto const high = steps[k - 1];
  auto const low = k >= 2 ? std::min(steps[k - 2], high) : duration(0);
  return low + scale(high - low, u);
}

}  // namespace rebound::retry
