#include "config/check.hpp"

#include "config/describe.hpp"

namespace rebound::config {

std::vector<policy_finding> check_policy(const policy& p) {
  std::vector<policy_finding> out;
  if (p.budget.window.count() == 0) out.push_back({"budget.window", "must be greater than 0", "R-7", false});
  auto const range = allowed_retries(p.context);
  auto const bounds = std::to_string(range.low) + ".." + std::to_string(range.high) + " for this context";
  if (p.max_retries < range.low || (p.max_retries > range.high && p.approval.empty()))
    out.push_back({"max_retries",
                   "max_retries " + std::to_string(p.max_retries) + " is outside " + bounds +
                       (p.max_retries > range.high ? "; above the range needs `approval: <record id>`" : ""),
                   "R-2", false});
  if (p.max_retries > range.high && !p.approval.empty())
    out.push_back({"max_retries",
                   "max_retries " + std::to_string(p.max_retries) + " is above " + bounds + ", allowed by approval \"" +
                       p.approval + "\"",
                   "R-2", true});
  if (!p.idempotency.inject && p.max_retries > 0)
    out.push_back({"idempotency.inject",
                   "POST and PATCH requests that carry no " + p.idempotency.header +
                       " header are forwarded once: rebound injects no key (inject: false)",
                   "R-6", true});
  if (p.total_timeout > max_total_timeout(p.context))
    out.push_back({"total_timeout",
                   !hands_over_calls(p.context) ? "a sync or grpc total_timeout may not exceed 30s"
                                                   : "total_timeout may not exceed 24h",
                   "R-3", false});
  if (p.total_timeout.count() == 0)
    out.push_back({"total_timeout", "must be greater than 0", {}, false});
  else if (p.attempt_timeout.count() == 0)
    out.push_back({"attempt_timeout", "must be greater than 0", {}, false});
  for (std::size_t i = 0; i < p.schedule.size(); ++i) {
    auto const step = p.schedule[i];
    if (step.count() == 0 || step > std::chrono::hours(24)) {
      out.push_back({"schedule", "every step must be greater than 0 and at most 24h", "R-3", false});
      break;
    }
    if (i > 0 && step <= p.schedule[i - 1]) {
      out.push_back({"schedule", "steps must increase: a repeated delay is a fixed interval", "R-1", false});
      break;
    }
  }
  if (!p.dead_letter && hands_over_calls(p.context))
    out.push_back({"dead_letter",
                   "an async, webhook or batch call that cannot be dead-lettered is lost when its retries run out",
                   "R-8", false});
  if (p.hedge.enabled() && p.context != context_kind::sync)
    out.push_back({"hedge",
                   "hedging is for synchronous HTTP/1.1 requests: a " + std::string(to_string(p.context)) +
                       " call is not hedged",
                   {}, false});
  else if (p.hedge.enabled() && !p.hedge.after_p95 && p.hedge.after >= p.attempt_timeout)
    out.push_back({"hedge",
                   "hedge.after must be shorter than attempt_timeout: every copy shares the first one's attempt "
                   "timeout, so a later hedge would never be sent",
                   {}, false});
  if (p.backoff.base.count() == 0 || p.backoff.base > p.backoff.cap)
    out.push_back({"backoff", "backoff.base must be greater than 0 and at most backoff.cap", "R-1", false});
  return out;
}

}  // namespace rebound::config
