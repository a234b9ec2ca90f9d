#pragma once
/** the retry budget of one dependency, shared by every worker.

    Original requests deposit, retries withdraw: over the rolling `window`, retries may be at
    most `ratio` of the original requests, plus `min_retries` that are always allowed (so a
    quiet dependency's rare failure is still retried; 0 is the strict reading of R-7).

    Both counts are rolling_counts (a ring of time buckets, one atomic word each), so a
    deposit or withdrawal is a compare-exchange and no mutex is taken per request. Two workers that check the budget
    at the same instant may both spend its last retry: the overshoot is at most one retry per
    worker, the price of taking no lock.

    Pure with respect to time: every call takes `now`. */
#include "proxy/retry/policy.hpp"
#include "proxy/retry/rolling_count.hpp"

#include <chrono>
#include <cstdint>

namespace rebound::retry {

class retry_budget {
 public:
  using time_point = std::chrono::steady_clock::time_point;
  explicit retry_budget(const retry::budget_policy& p);

  /// An original request (the first attempt of a request) was sent.
  void deposit(time_point now);
  /// Takes one retry from the budget; false (and nothing taken) when it is exhausted.
  bool try_withdraw(time_point now);

  struct usage {
    std::uint64_t requests = 0;  ///< originals in the window
    std::uint64_t retries = 0;   ///< retries spent in the window
    std::uint64_t allowed = 0;   ///< retries the window allows: max(min_retries, ratio * requests)
    /// retries / allowed (R-10's retry_budget_utilization_ratio); 0 when nothing is allowed or spent.
    double utilization() const {
      return allowed ? static_cast<double>(retries) / static_cast<double>(allowed) : (retries ? 1.0 : 0.0);
    }
  };
  usage in_window(time_point now) const;

  const retry::budget_policy& policy() const { return policy_; }

 private:
  std::uint64_t allowed_for(std::uint64_t requests) const;

  retry::budget_policy policy_;
  rolling_count requests_;
  rolling_count retries_;
};

}  // namespace rebound::retry
