#include "proxy/retry/step.hpp"

#include "proxy/retry/policy.hpp"
#include "proxy/retry/classify.hpp"
#include "proxy/retry/concurrency_lane.hpp"
#include "proxy/retry/layers.hpp"

#include <boost/throw_exception.hpp>

#include <algorithm>
#include <stdexcept>

namespace rebound::retry {

void throw_exception_from_error(const attempt_failure& f, const boost::source_location& loc) {
  boost::throw_exception(std::runtime_error("attempt failed: " + f.message), loc);
}

using steady = std::chrono::steady_clock;

void record_attempt(dependency_gate& gate, attempt_observer& observer, const attempt_report& r) {
  observer.attempt_done(r);
  if (r.cancelled) return;
  gate.record(classify(r.outcome, retry_on::r4_default()) == verdict::retryable);
}

retry_step::retry_step(step_context ctx, steady::time_point deadline, unsigned attempts_before)
    : ctx_(ctx),
      deadline_(ctx.facts.deadline ? std::min(deadline, *ctx.facts.deadline) : deadline),
      max_attempts_(1 + (ctx.facts.may_retry ? ctx.policy.max_retries : 0)) {
  result_.attempts = attempts_before;
}

std::string_view to_string(call_end e) {
  switch (e) {
    case call_end::success:
      return "success";
    case call_end::failure:
      return "failure";
    case call_end::abandoned:
      break;
  }
  return "abandoned";
}

next_step retry_step::after(attempt_summary& summary, steady::time_point attempt_start, step_time at, bool draining) {
  auto next = judge(summary, attempt_start, at, draining);
  if (next.retry) return next;
  // What the client gets stands now: the last answer, unless the step put a failure in its
  // place (an error, the budget's refusal, R-5's no time left).
  bool const succeeded = next.stopped == stop_reason::final && !result_.failure &&
                         classify(summary.outcome, retry_on::r4_default()) == verdict::success;
  end(succeeded ? call_end::success : call_end::failure);
  return next;
}

void retry_step::end(call_end how) {
  if (ended_) return;
  ended_ = true;
  ctx_.observer.ended(result_.attempts, how, retry::to_string(ctx_.policy.context));
}

next_step retry_step::judge(attempt_summary& summary, steady::time_point attempt_start, step_time at, bool draining) {
  auto& failure = summary.failure;
  auto const& facts = ctx_.facts;
  // when the request's deadline, not the attempt's, cut the attempt short, the whole
  // request is out of time.
  if (failure && failure->type == error_type::attempt_timeout &&
      std::min(attempt_start + ctx_.policy.attempt_timeout, deadline_) == deadline_)
    failure = retry::attempt_failure{error_type::deadline_exceeded,
                                     facts.deadline && *facts.deadline == deadline_
                                         ? "the caller's deadline passed (grpc-timeout or X-Request-Timeout)"
                                         : "total_timeout reached"};
  attempt_outcome const outcome = failure ? attempt_outcome{std::nullopt, failure->type} : summary.outcome;
  result_.failure = failure;
  auto const took =
      std::chrono::duration_cast<std::chrono::microseconds>(at.now - summary.started.value_or(attempt_start));
  // A hedged run (hedge.hpp) sent result.attempts - hedges + 1 .. result.attempts; the
  // others' reports were made by the hedging.
  record_attempt(ctx_.gate, ctx_.observer, {result_.attempts - summary.hedges + summary.answered_by, outcome, took});
  auto const d = decide(ctx_.policy, decision_input(summary, outcome, at));
  if (auto const* s = std::get_if<stop>(&d)) return stopped(*s, summary, outcome, draining);
  if (draining) return {};
  return retrying(std::get<retry_in>(d), summary, outcome, took);
}

attempt_facts retry_step::decision_input(const attempt_summary& summary, const attempt_outcome& outcome, step_time at) {
  attempt_facts af;
  af.outcome = outcome;
  if (!summary.failure) {
    af.retry_after = summary.retry_after;
    af.grpc_pushback = summary.grpc_pushback;
    af.below = summary.below;
  }
  af.attempts = result_.attempts;
  af.may_repeat = ctx_.facts.may_retry && summary.repeatable;
  af.previous_wait = previous_wait_;
  af.now = at.now;
  af.deadline = deadline_;
  af.wall_now = at.wall_now;
  af.credential_expires = ctx_.facts.credential_expires;
  af.u = std::uniform_real_distribution<double>(0.0, 1.0)(ctx_.rng);
  return af;
}

next_step retry_step::stopped(const stop& s, const attempt_summary& summary, const attempt_outcome& outcome,
                              bool draining) {
  auto const& facts = ctx_.facts;
  auto const& log = ctx_.log;
  result_.gave_up = gave_up_after_retrying(s.reason, result_.attempts);
  next_step const stopped{false, duration{0}, s.reason, {}};
  switch (s.reason) {
    case stop_reason::final:
      return stopped;
    case stop_reason::not_repeatable:
      if (ctx_.policy.max_retries > 0 && result_.attempts == 1)
        log.info("retry_skipped", facts.summary(),
                 {{"error_type", outcome_name(outcome)},
                  {"reason", summary.repeatable ? facts.why_not
                                                : std::string_view("the streamed request outgrew "
                                                                   "max_retry_body: sent once")}});
      return stopped;
    case stop_reason::exhausted:
      log.warn("retry_exhausted", facts.summary(),
               {{"attempts", result_.attempts},
                {"max_attempts", max_attempts_},
                {"error_type", outcome_name(outcome)},
                {"idempotency_key", facts.idempotency_key}});
      ctx_.observer.exhausted();
      return stopped;
    case stop_reason::layered:
    case stop_reason::overloaded:
      ctx_.observer.declined(to_string(s.reason));
      break;  // logged as retry_stopped with its reason, below
    default:
      break;
  }
  if (draining) return stopped;
  log.warn("retry_stopped", facts.summary(),
           {{"attempts", result_.attempts},
            {"error_type", outcome_name(outcome)},
            {"reason", to_string(s.reason)},
            {"retry_after_ms", static_cast<long long>(s.retry_after ? s.retry_after->count() : -1)}});
  // a Retry-After past the deadline returns that response at once. Without a response
  // to return, the client learns why from the error type.
  if (summary.failure && s.error)
    result_.failure = retry::attempt_failure{*s.error, "no time left for another attempt"};
  return stopped;
}

next_step retry_step::retrying(const retry_in& go, const attempt_summary& summary, const attempt_outcome& outcome,
                               std::chrono::microseconds took) {
  auto const& facts = ctx_.facts;
  auto const& log = ctx_.log;
  auto const& failure = summary.failure;
  if (ctx_.asks_budget) {
    if (auto const permit = permit_retry(); !permit.granted) {
      log.warn("retry_suppressed", facts.summary(),
               {{"attempts", result_.attempts}, {"error_type", outcome_name(outcome)}, {"reason", permit.why}});
      result_.gave_up = result_.attempts > 1;
      if (failure)
        result_.failure =
            retry::attempt_failure{permit.refusal, std::string(permit.why) + "; last attempt: " + failure->message};
      return {};
    }
  }
  previous_wait_ = go.wait;
  ctx_.observer.retry_scheduled(go.wait);
  auto const address = summary.address.is_unspecified() ? std::string() : summary.address.to_string();
  log.info("retry_attempt", facts.summary(),
           {{"attempt", result_.attempts + 1},
            {"max_attempts", max_attempts_},
            {"backoff_ms", static_cast<long long>(go.wait.count())},
            {"error_type", outcome_name(outcome)},
            {"idempotency_key", facts.idempotency_key},
            {"status", outcome.status.value_or(0)},
            {"grpc_status", outcome.grpc_status},
            {"grpc_method", facts.grpc ? std::optional<std::string_view>(facts.path) : std::nullopt},
            {"duration_ms", static_cast<long long>(took.count() / 1000)},
            {"address", address.empty() ? std::nullopt : std::optional<std::string_view>(address)}});
  return {true, go.wait, std::nullopt, failure ? std::string() : outcome_name(outcome)};
}

void retry_step::caller_left(std::string_view reason) {
  result_.client_gone = true;
  end(call_end::abandoned);
  ctx_.log.info("retry_cancelled", ctx_.facts.summary(), {{"attempts", result_.attempts}, {"reason", reason}});
}

retry_permit retry_step::permit_retry() {
  // The slot first: a retry the limit has no room for spends no budget.
  if (ctx_.slots && !ctx_.slots->has_room()) {
    ctx_.observer.limited();
    return {false, error_type::concurrency_limited, "the concurrency limit is reached: no room for a retry"};
  }
  return ctx_.gate.allow_retry();
}

void retry_step::limited() {
  ctx_.observer.limited();
  result_.gave_up = result_.attempts > 1;
  result_.failure = limited_failure(ctx_.facts.dependency, result_.attempts);
  end(call_end::failure);
}

void retry_step::drain_cut(const std::string& last_outcome) {
  end(call_end::failure);
  // The failed attempt's response went with its connection, so the message says what it was.
  if (!result_.failure)
    result_.failure = retry::attempt_failure{
        error_type::deadline_exceeded, "shutting down before the retry; the last attempt answered " + last_outcome};
}

}  // namespace rebound::retry
