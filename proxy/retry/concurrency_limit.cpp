#include "proxy/retry/concurrency_limit.hpp"

#include <algorithm>
#include <cmath>

namespace rebound::retry {
namespace {

double share(unsigned process_value, unsigned shares) {
  shares = std::max(1u, shares);
  return std::max(1.0, std::ceil(static_cast<double>(process_value) / shares));
}

}  // namespace

concurrency_limit::clock::duration concurrency_limit::samples::median() {
  auto const mid = values.begin() + static_cast<std::ptrdiff_t>(count / 2);
  std::nth_element(values.begin(), mid, values.begin() + static_cast<std::ptrdiff_t>(count));
  return *mid;
}

concurrency_limit::concurrency_limit(const retry::concurrency_policy& p, unsigned shares, clock::time_point now)
    : mode_(p.mode),
      min_(share(p.min_limit, shares)),
      max_(std::max(min_, share(p.max_limit, shares))),
      tolerance_(p.tolerance),
      probe_interval_(p.probe_interval),
      limit_(p.mode == retry::concurrency_mode::fixed ? share(p.limit, shares) : min_),
      window_end_(now + window) {
  // Nothing is known of the dependency yet: the first thing to learn is its minimum RTT.
  if (adaptive()) start_probe(now);
}

unsigned concurrency_limit::limit() const {
  if (mode_ == retry::concurrency_mode::off) return ~0u;
  return static_cast<unsigned>(limit_);
}

std::optional<concurrency_limit::ticket> concurrency_limit::try_acquire(clock::time_point now) {
  if (adaptive() && !probing() && now >= next_probe_) start_probe(now);
  if (!has_room()) return std::nullopt;
  ++in_flight_;
  return ticket{now, probe_};
}

void concurrency_limit::release(const ticket& t, clock::time_point now, bool latency, double draw) {
  if (in_flight_ > 0) --in_flight_;
  if (!adaptive()) return;
  auto const took = now - t.start;
  if (probing()) {
    // Only attempts that started under the probe's low limit say what the dependency gives
    // unloaded; those still in flight from before it would raise the minimum.
    if (latency && t.probe == probe_) probe_set_.add(took);
    if (probe_set_.count >= probe_samples) {
      min_rtt_ = probe_set_.median();
      probe_ = 0;
      limit_ = limit_before_probe_;
      auto const stretch = 1.0 + probe_jitter * std::clamp(draw, 0.0, 1.0);
      next_probe_ = now + std::chrono::duration_cast<clock::duration>(probe_interval_ * stretch);
      window_set_.count = 0;
      window_end_ = now + window;
    }
    return;
  }
  if (latency) window_set_.add(took);
  if (now >= window_end_) end_window(now);
}

void concurrency_limit::start_probe(clock::time_point now) {
  limit_before_probe_ = limit_;
  limit_ = min_;
  probe_ = ++probes_;
  if (probe_ == 0) probe_ = ++probes_;  // 0 means "no probe"; skipped after 2^32 probes
  probe_set_.count = 0;
  (void)now;
}

void concurrency_limit::end_window(clock::time_point now) {
  window_end_ = now + window;
  if (window_set_.count == 0 || !min_rtt_) return;
  auto const sample = window_set_.median();
  window_set_.count = 0;
  auto const ideal = std::chrono::duration<double>(*min_rtt_).count() * (1.0 + tolerance_);
  auto const seen = std::max(std::chrono::duration<double>(sample).count(), 1e-9);
  auto const gradient = std::clamp(ideal / seen, 0.5, 2.0);
  auto const scaled = limit_ * gradient;
  limit_ = std::clamp(scaled + std::sqrt(scaled), min_, max_);
}

}  // namespace rebound::retry
