#include "proxy/retry/decide.hpp"

#include "proxy/retry/retry_after.hpp"

namespace rebound::retry {

decision decide(const retry::policy& policy, const attempt_facts& f) {
  if (classify(f.outcome, policy.retry_on) != verdict::retryable) return stop{stop_reason::final, {}, {}};
  if (!f.may_repeat) return stop{stop_reason::not_repeatable, {}, {}};
  // Before the count: a layer below that shed load or already spent its retries makes a
  // retry here pure amplification, however many retries this layer has left.
  if (f.below.overloaded) return stop{stop_reason::overloaded, {}, {}};
  if (f.below.gave_up && !policy.retry_layered) return stop{stop_reason::layered, {}, {}};
  unsigned const max_attempts = 1 + policy.max_retries;
  bool const dns_spent = f.outcome.error == error_type::dns_failure && f.attempts >= dns_failure_max_attempts;
  if (f.attempts >= max_attempts || dns_spent) return stop{stop_reason::exhausted, {}, {}};

  // the retry about to happen is number `attempts` (1 for the first retry).
  duration const backoff =
      !policy.schedule.empty()                           ? scheduled_jitter(policy.schedule, f.attempts, f.u)
      : policy.backoff.jitter == retry::jitter_kind::full
          ? full_jitter(f.attempts, policy.backoff.base, policy.backoff.cap, f.u)
          : decorrelated_jitter(f.previous_wait.count() > 0 ? f.previous_wait : policy.backoff.base,
                                policy.backoff.base, policy.backoff.cap, f.u);
  std::optional<duration> retry_after;
  if (f.grpc_pushback) {
    retry_after = parse_grpc_pushback(*f.grpc_pushback);
    if (!retry_after) return stop{stop_reason::pushback_refused, {}, {}};
  } else if (f.retry_after) {
    retry_after = parse_retry_after(*f.retry_after, f.wall_now);
  }
  auto const remaining = std::chrono::duration_cast<duration>(f.deadline - f.now);
  auto const plan = plan_wait(backoff, retry_after, remaining, std::min(policy.attempt_timeout, min_attempt_time));
  if (!plan.retry) {
    auto const reason = *plan.why_not == error_type::retry_after_exceeds_deadline
                            ? stop_reason::retry_after_beyond_deadline
                            : stop_reason::deadline;
    return stop{reason, plan.why_not, retry_after};
  }
  if (f.credential_expires && f.wall_now + plan.wait >= *f.credential_expires)
    return stop{stop_reason::credential_expired, {}, retry_after};
  return retry_in{plan.wait, retry_after};
}

std::string_view to_string(stop_reason r) {
  switch (r) {
    case stop_reason::final:
      return "final";
    case stop_reason::not_repeatable:
      return "not_repeatable";
    case stop_reason::exhausted:
      return "exhausted";
    case stop_reason::retry_after_beyond_deadline:
      return "retry_after_exceeds_deadline";
    case stop_reason::deadline:
      return "deadline_exceeded";
    case stop_reason::credential_expired:
      return "credential_expired";
    case stop_reason::pushback_refused:
      return "pushback_refused";
    case stop_reason::layered:
      return "layered";
    case stop_reason::overloaded:
      return "overloaded";
  }
  return "final";
}

}  // namespace rebound::retry
