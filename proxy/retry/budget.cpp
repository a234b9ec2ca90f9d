#include "proxy/retry/budget.hpp"

#include <algorithm>
#include <cmath>

namespace rebound::retry {

retry_budget::retry_budget(const retry::budget_policy& p) : policy_(p), requests_(p.window), retries_(p.window) {}

std::uint64_t retry_budget::allowed_for(std::uint64_t requests) const {
  auto const by_ratio = static_cast<std::uint64_t>(std::floor(policy_.ratio * static_cast<double>(requests)));
  return std::max<std::uint64_t>(policy_.min_retries, by_ratio);
}

void retry_budget::deposit(time_point now) { requests_.add(now); }

bool retry_budget::try_withdraw(time_point now) {
  if (retries_.in_window(now) >= allowed_for(requests_.in_window(now))) return false;
  retries_.add(now);
  return true;
}

retry_budget::usage retry_budget::in_window(time_point now) const {
  usage u;
  u.requests = requests_.in_window(now);
  u.retries = retries_.in_window(now);
  u.allowed = allowed_for(u.requests);
  return u;
}

}  // namespace rebound::retry
