#include "proxy/delivery/task_step.hpp"

#include "proxy/retry/backoff.hpp"

namespace rebound::delivery {

next_state judge(const retry::next_step& next, const retry::attempt_summary& summary, const retry::policy& policy,
                 wall::time_point now) {
  if (next.retry) return {store::task_status::pending, now + next.wait, {}};
  if (!next.stopped)  // the step asks no budget for delivery, so only a drain could say this
    return {store::task_status::pending, now + policy.backoff.cap, {}};
  auto const outcome = summary.failure ? retry::attempt_outcome{std::nullopt, summary.failure->type} : summary.outcome;
  if (*next.stopped == retry::stop_reason::final && outcome.status && *outcome.status < 400)
    return {store::task_status::succeeded, now, {}};
  std::string reason =
      *next.stopped == retry::stop_reason::final ? retry::outcome_name(outcome) : std::string(to_string(*next.stopped));
  return {store::task_status::dead_lettered, now, std::move(reason)};
}

std::chrono::milliseconds postponement_for(held_back why, retry::duration breaker_retry_after, unsigned attempts,
                                           const retry::policy& policy, double u) {
  using std::chrono::duration_cast;
  switch (why) {
    case held_back::breaker_open:
      return duration_cast<std::chrono::milliseconds>(breaker_retry_after);
    case held_back::budget_spent:
      return duration_cast<std::chrono::milliseconds>(policy.backoff.cap);
    case held_back::concurrency_limit:
      break;
  }
  return duration_cast<std::chrono::milliseconds>(
      retry::full_jitter(attempts + 1, policy.backoff.base, policy.backoff.cap, u));
}

std::string_view to_string(held_back why) {
  return why == held_back::concurrency_limit ? "concurrency limit" : "budget or circuit breaker (R-7)";
}

task_end end_of(store::task_status judged, bool is_alert) {
  using store::task_status;
  switch (judged) {
    case task_status::succeeded:
      return {judged, true, false};
    case task_status::dead_lettered:
      if (is_alert) return {task_status::exhausted, true, false};
      return {judged, true, true};
    case task_status::pending:
      return {judged, false, false};
    default:  // judge() ends a task no other way
      return {judged, true, false};
  }
}

}  // namespace rebound::delivery
