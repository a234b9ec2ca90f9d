#include "proxy/retry/breaker.hpp"

#include <cmath>

namespace rebound::retry {
namespace {

using mode = retry::breaker_mode;

constexpr std::uint64_t state_bits = 2;
constexpr std::uint64_t state_mask = (1u << state_bits) - 1;

std::int64_t ns_of(circuit_breaker::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}
circuit_breaker::time_point at_ns(std::int64_t ns) {
  return circuit_breaker::time_point{} +
         std::chrono::duration_cast<circuit_breaker::time_point::duration>(std::chrono::nanoseconds(ns));
}
std::uint64_t pack(breaker_state s, circuit_breaker::time_point t) {
  return (static_cast<std::uint64_t>(ns_of(t)) << state_bits) | static_cast<std::uint64_t>(s);
}
breaker_state state_of(std::uint64_t word) { return static_cast<breaker_state>(word & state_mask); }
circuit_breaker::time_point time_of(std::uint64_t word) { return at_ns(static_cast<std::int64_t>(word >> state_bits)); }

}  // namespace

std::string_view to_string(breaker_state s) {
  switch (s) {
    case breaker_state::closed:
      return "closed";
    case breaker_state::half_open:
      return "half_open";
    case breaker_state::open:
      return "open";
  }
  return "closed";
}

circuit_breaker::circuit_breaker(const retry::breaker_policy& p, time_point created)
    : policy_(p),
      word_(pack(breaker_state::closed, time_point{})),
      since_ns_(ns_of(created)),
      attempts_(p.window),
      failures_(p.window) {}

breaker_state circuit_breaker::state() const { return state_of(word_.load(std::memory_order_acquire)); }

circuit_breaker::time_point circuit_breaker::since() const { return at_ns(since_ns_.load(std::memory_order_relaxed)); }

std::optional<breaker_transition> circuit_breaker::move(std::uint64_t seen, breaker_state to, time_point stamp,
                                                        time_point now, std::string_view reason) {
  auto const from = state_of(seen);
  if (!word_.compare_exchange_strong(seen, pack(to, stamp), std::memory_order_acq_rel)) return std::nullopt;
  since_ns_.store(ns_of(now), std::memory_order_relaxed);
  return breaker_transition{from, to, reason};
}

std::optional<breaker_transition> circuit_breaker::open_from(std::uint64_t seen, std::string_view reason,
                                                             time_point now, double u) {
  // +-10%: a fleet of sidecars that opened together does not probe together.
  auto const jittered = std::chrono::duration_cast<time_point::duration>(std::chrono::duration<double, std::nano>(
      static_cast<double>(std::chrono::nanoseconds(policy_.open_for).count()) * (0.9 + 0.2 * u)));
  return move(seen, breaker_state::open, now + jittered, now, reason);
}

circuit_breaker::decision circuit_breaker::admit(time_point now) {
  decision d;
  if (policy_.mode == mode::off) return d;
  auto word = word_.load(std::memory_order_acquire);
  if (state_of(word) == breaker_state::open) {
    auto const until = time_of(word);
    if (now < until) {
      if (policy_.mode == mode::enforce) {
        d.allowed = false;
        d.retry_after = std::chrono::ceil<duration>(until - now);
      }
      return d;
    }
    // The winner opens the round. A worker that sees half_open a moment before the round is
    // set counts against the old one: at worst it is refused for a second or probes early.
    d.transition = move(word, breaker_state::half_open, now, now, "open_for elapsed");
    if (d.transition) start_round();
    word = word_.load(std::memory_order_acquire);
    if (state_of(word) == breaker_state::open && policy_.mode == mode::enforce) {  // a probe failed meanwhile
      d.allowed = false;
      d.retry_after = std::max(duration(1), std::chrono::ceil<duration>(time_of(word) - now));
      return d;
    }
  }
  if (state_of(word) != breaker_state::half_open || policy_.mode != mode::enforce) return d;
  if (probes_left_.fetch_sub(1, std::memory_order_relaxed) > 0) return d;
  // No probe left. A round whose probes never reported within open_for starts again.
  if (now - time_of(word) >= policy_.open_for &&
      word_.compare_exchange_strong(word, pack(breaker_state::half_open, now), std::memory_order_acq_rel)) {
    start_round();
    probes_left_.fetch_sub(1, std::memory_order_relaxed);
    return d;
  }
  d.allowed = false;
  auto const round_ends = time_of(word) + policy_.open_for;
  d.retry_after = std::max(duration(1000), std::chrono::ceil<duration>(round_ends - now));
  return d;
}

void circuit_breaker::start_round() {
  probe_successes_.store(0, std::memory_order_relaxed);
  probes_left_.store(static_cast<std::int64_t>(policy_.half_open_probes), std::memory_order_relaxed);
}

bool circuit_breaker::allow_retry() const { return policy_.mode != mode::enforce || state() == breaker_state::closed; }

std::optional<breaker_transition> circuit_breaker::record(bool failed, time_point now, double u) {
  if (policy_.mode == mode::off) return std::nullopt;
  auto const word = word_.load(std::memory_order_acquire);
  switch (state_of(word)) {
    case breaker_state::open:
      return std::nullopt;  // an attempt that began before the breaker opened says nothing new
    case breaker_state::half_open:
      if (failed) return open_from(word, "probe failed", now, u);
      if (probe_successes_.fetch_add(1, std::memory_order_relaxed) + 1 <
          static_cast<std::int64_t>(policy_.half_open_probes))
        return std::nullopt;
      if (auto t = move(word, breaker_state::closed, now, now, "probes succeeded")) {
        // The failures that opened it must not open it again at once.
        attempts_.clear();
        failures_.clear();
        return t;
      }
      return std::nullopt;
    case breaker_state::closed:
      break;
  }
  attempts_.add(now);
  if (!failed) return std::nullopt;
  failures_.add(now);
  auto const attempts = attempts_.in_window(now);
  auto const failures = failures_.in_window(now);
  if (attempts < policy_.min_requests ||
      static_cast<double>(failures) < policy_.failure_ratio * static_cast<double>(attempts))
    return std::nullopt;
  return open_from(word, "failure_ratio", now, u);
}

std::optional<breaker_transition> circuit_breaker::budget_exhausted(time_point now, double u) {
  if (policy_.mode == mode::off || !policy_.open_on_budget_exhausted) return std::nullopt;
  auto const word = word_.load(std::memory_order_acquire);
  if (state_of(word) != breaker_state::closed) return std::nullopt;
  return open_from(word, "budget_exhausted", now, u);
}

}  // namespace rebound::retry
