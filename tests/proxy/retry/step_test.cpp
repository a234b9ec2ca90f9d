// The retry step (retry/step.hpp): every effect between one attempt and the next, as a table
// of (facts -> effects) rows. The clock is a value, the random source is seeded, the budget
// and breaker are a recording gate and the log is captured: nothing sleeps or opens a socket.
#include "proxy/retry/step.hpp"

#include "proxy/retry/concurrency_lane.hpp"
#include "tests/proxy/retry/recording_gate.hpp"

#include <gtest/gtest.h>

#include <vector>

using namespace rebound;
using namespace rebound::retry;
using namespace std::chrono_literals;

// Rows name only what they set; the rest keep their defaults. GCC 12 warns about every
// member a designated initializer leaves out, defaults or not.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace step_test {
namespace {

const auto t0 = std::chrono::steady_clock::time_point{} + 1000h;
const auto wall = std::chrono::system_clock::from_time_t(784111740);

struct recording_observer final : attempt_observer {
  std::vector<attempt_report> reports;
  std::vector<duration> scheduled;
  unsigned exhausted_count = 0;
  std::vector<std::string> declined_reasons;
  struct end {
    unsigned attempts;
    call_end how;
    std::string context;
  };
  std::vector<end> ends;
  void ended(unsigned attempts, call_end how, std::string_view context) override {
    ends.push_back({attempts, how, std::string(context)});
  }
  void attempt_done(const attempt_report& r) override { reports.push_back(r); }
  void retry_scheduled(duration wait) override { scheduled.push_back(wait); }
  void exhausted() override { ++exhausted_count; }
  void declined(std::string_view reason) override { declined_reasons.emplace_back(reason); }
};

/// One row: what happened, and what the step must do about it.
struct row {
  const char* name;
  // facts
  attempt_outcome outcome;       ///< a status, or an error type (a failure)
  unsigned attempts_before = 0;  ///< attempts made before this one
  bool may_retry = true;         ///< R-6
  bool budget_grants = true;     ///< R-7
  bool asks_budget = true;       ///< false: delivery
  bool draining = false;
  std::optional<std::string_view> retry_after;
  // effects
  bool retries = false;
  std::optional<stop_reason> stopped;
  unsigned breaker_failures = 0;  ///< what the breaker was told counts against the dependency
  unsigned budget_asked = 0;
  const char* logged = nullptr;      ///< the one retry_* event logged, or null for none
  std::optional<error_type> answer;  ///< the error the client gets when no response is left
  /// How the request ended, counted once (retry_request_attempts); unset: it goes on.
  std::optional<call_end> ended;
};

struct fixture : retry_test::log_capture {
  retry::policy policy;
  request_facts facts;
  retry_test::recording_gate gate;
  recording_observer observer;
  std::mt19937_64 rng{7};

  fixture() {
    policy.max_retries = 3;
    policy.backoff.base = 100ms;
    policy.backoff.cap = 1000ms;
    policy.attempt_timeout = 2s;
    policy.total_timeout = 30s;
    facts.dependency = "payments";
    facts.method = "POST";
    facts.path = "/charge";
    facts.correlation_id = "corr-1";
    facts.idempotency_key = "key-1";
    facts.why_not = "POST without an idempotency key";
  }

  next_step run(const row& r, attempts_result* result = nullptr) {
    facts.may_retry = r.may_retry;
    gate.grant = r.budget_grants;
    retry_step step({policy, facts, log, rng, gate, observer, r.asks_budget}, t0 + policy.total_timeout,
                    r.attempts_before);
    step.attempt_made();
    attempt_summary s;
    if (r.outcome.error)
      s.failure = retry::attempt_failure{*r.outcome.error, "scripted"};
    else
      s.outcome = r.outcome;
    s.retry_after = r.retry_after;
    auto const next = step.after(s, t0, {t0 + 10ms, wall}, r.draining);
    if (result) *result = step.result();
    return next;
  }

  std::size_t count(std::string_view event) const {
    auto const text = log_text.str();
    std::size_t n = 0;
    for (auto at = text.find(event); at != std::string::npos; at = text.find(event, at + 1)) ++n;
    return n;
  }
};

attempt_outcome status(unsigned s) { return {s, std::nullopt}; }
attempt_outcome error(error_type e) { return {std::nullopt, e}; }

const row rows[] = {
    {.name = "a success is final and counts nothing against the dependency",
     .outcome = status(200),
     .stopped = stop_reason::final,
     .ended = call_end::success},
    {.name = "a 404 is the upstream's answer: final, and no breaker failure",
     .outcome = status(404),
     .stopped = stop_reason::final,
     .ended = call_end::failure},
    {.name = "R-4: a 503 is retried, the breaker told, the budget charged, retry_attempt logged",
     .outcome = status(503),
     .retries = true,
     .breaker_failures = 1,
     .budget_asked = 1,
     .logged = "retry_attempt"},
    {.name = "R-7: a refused budget sends no retry and answers budget_exhausted",
     .outcome = error(error_type::connect_refused),
     .budget_grants = false,
     .breaker_failures = 1,
     .budget_asked = 1,
     .logged = "retry_suppressed",
     .answer = error_type::budget_exhausted,
     .ended = call_end::failure},
    {.name = "R-2: the last allowed attempt is exhausted, whatever the budget",
     .outcome = status(503),
     .attempts_before = 3,
     .stopped = stop_reason::exhausted,
     .breaker_failures = 1,
     .logged = "retry_exhausted",
     .ended = call_end::failure},
    {.name = "R-6: a request that may not go again is sent once, and says why",
     .outcome = status(503),
     .may_retry = false,
     .stopped = stop_reason::not_repeatable,
     .breaker_failures = 1,
     .logged = "retry_skipped",
     .ended = call_end::failure},
    {.name = "R-5: a Retry-After past the deadline stops at once",
     .outcome = status(503),
     .retry_after = "3600",
     .stopped = stop_reason::retry_after_beyond_deadline,
     .breaker_failures = 1,
     .logged = "retry_stopped",
     .ended = call_end::failure},
    {.name = "delivery asks the budget when it sends, not when it schedules",
     .outcome = status(503),
     .budget_grants = false,
     .asks_budget = false,
     .retries = true,
     .breaker_failures = 1,
     .logged = "retry_attempt"},
    {.name = "a draining process sends no retry, charges no budget and logs no stop",
     .outcome = status(503),
     .draining = true,
     .breaker_failures = 1,
     .ended = call_end::failure},
};

}  // namespace

TEST(RetryStep, EveryRowHasItsEffects) {
  for (auto const& r : rows) {
    SCOPED_TRACE(r.name);
    fixture f;
    attempts_result result;
    auto const next = f.run(r, &result);
    EXPECT_EQ(next.retry, r.retries);
    EXPECT_EQ(next.stopped, r.stopped);
    EXPECT_EQ(f.gate.recorded, 1u) << "every attempt reaches the breaker once";
    EXPECT_EQ(f.gate.failures, r.breaker_failures);
    EXPECT_EQ(f.gate.asked, r.budget_asked);
    ASSERT_EQ(f.observer.reports.size(), 1u);
    EXPECT_EQ(f.observer.reports[0].attempt, r.attempts_before + 1);
    EXPECT_EQ(f.observer.scheduled.size(), r.retries ? 1u : 0u);
    EXPECT_EQ(f.observer.exhausted_count, r.stopped == stop_reason::exhausted ? 1u : 0u);
    for (auto const* event : {"retry_attempt", "retry_suppressed", "retry_exhausted", "retry_skipped", "retry_stopped"})
      EXPECT_EQ(f.count(std::string("\"") + event + "\""), r.logged && std::string_view(r.logged) == event ? 1u : 0u)
          << event;
    if (r.logged) {
      EXPECT_EQ(f.count("\"correlation_id\":\"corr-1\""), 1u) << "the line names the request";
    }
    if (r.answer) {
      ASSERT_TRUE(result.failure);
      EXPECT_EQ(result.failure->type, *r.answer);
    }
    if (!r.ended) {
      EXPECT_TRUE(f.observer.ends.empty()) << "a request that goes on has not ended";
    } else {
      ASSERT_EQ(f.observer.ends.size(), 1u);
      EXPECT_EQ(f.observer.ends[0].how, *r.ended);
      EXPECT_EQ(f.observer.ends[0].attempts, r.attempts_before + 1);
      EXPECT_EQ(f.observer.ends[0].context, "sync");
    }
  }
}

TEST(RetryStep, Seed003_ASuccessOnTheSecondAttemptEndsOnceWithTwoAttempts) {
  fixture f;
  f.policy.context = retry::context_kind::webhook;
  f.facts.may_retry = true;
  retry_step step({f.policy, f.facts, f.log, f.rng, f.gate, f.observer}, t0 + 30s);
  attempt_summary s;
  s.outcome = status(503);
  step.attempt_made();
  ASSERT_TRUE(step.after(s, t0, {t0 + 10ms, wall}, false).retry);
  EXPECT_TRUE(f.observer.ends.empty());
  attempt_summary ok;
  ok.outcome = status(201);
  step.attempt_made();
  EXPECT_FALSE(step.after(ok, t0 + 1s, {t0 + 1s + 10ms, wall}, false).retry);
  step.caller_left("late");  // an end already counted is not counted again
  ASSERT_EQ(f.observer.ends.size(), 1u);
  EXPECT_EQ(f.observer.ends[0].attempts, 2u);
  EXPECT_EQ(f.observer.ends[0].how, call_end::success);
  EXPECT_EQ(f.observer.ends[0].context, "webhook");
}

TEST(RetryStep, R1_TheWaitIsDrawnFromTheConfiguredBackoff) {
  fixture f;
  auto const next = f.run({.name = "503", .outcome = status(503)});
  ASSERT_TRUE(next.retry);
  EXPECT_GE(next.wait, 0ms);
  EXPECT_LE(next.wait, f.policy.backoff.base) << "full jitter of the first retry stays under base";
  ASSERT_EQ(f.observer.scheduled.size(), 1u);
  EXPECT_EQ(f.observer.scheduled[0], next.wait) << "the metric sees the wait the loop waits";
}

TEST(RetryStep, R3_AnAttemptCutByTheRequestDeadlineIsOutOfTime) {
  fixture f;
  f.policy.attempt_timeout = 60s;  // longer than total_timeout: the total deadline cut the attempt
  attempts_result result;
  f.run({.name = "timeout", .outcome = error(error_type::attempt_timeout)}, &result);
  ASSERT_TRUE(result.failure);
  EXPECT_EQ(result.failure->type, error_type::deadline_exceeded);
  EXPECT_EQ(result.failure->message, "total_timeout reached");
}

TEST(RetryStep, R3_TheCallersDeadlineIsNamedWhenItIsTheOneThatPassed) {
  fixture f;
  f.facts.deadline = t0 + 1s;  // sooner than total_timeout, and than the attempt timeout
  attempts_result result;
  f.run({.name = "timeout", .outcome = error(error_type::attempt_timeout)}, &result);
  ASSERT_TRUE(result.failure);
  EXPECT_EQ(result.failure->type, error_type::deadline_exceeded);
  EXPECT_NE(result.failure->message.find("caller's deadline"), std::string::npos);
}

TEST(RetryStep, TheAttemptTimeoutAloneIsRetried) {
  fixture f;
  attempts_result result;
  auto const next = f.run({.name = "timeout", .outcome = error(error_type::attempt_timeout)}, &result);
  EXPECT_TRUE(next.retry);
  EXPECT_EQ(result.failure->type, error_type::attempt_timeout);
}

TEST(RetryStep, ACallerWhoLeftIsNobodysFailure) {
  fixture f;
  retry_step step({f.policy, f.facts, f.log, f.rng, f.gate, f.observer}, t0 + 30s);
  step.attempt_made();
  step.caller_left("the client cancelled the request");
  EXPECT_TRUE(step.result().client_gone);
  EXPECT_EQ(f.gate.recorded, 0u) << "nothing reached the breaker";
  EXPECT_EQ(f.gate.asked, 0u) << "nothing was charged to the budget";
  EXPECT_TRUE(f.observer.reports.empty());
  EXPECT_EQ(f.count("\"retry_cancelled\""), 1u);
  ASSERT_EQ(f.observer.ends.size(), 1u);
  EXPECT_EQ(f.observer.ends[0].how, call_end::abandoned);
}

TEST(RetryStep, ADrainCuttingTheWaitTellsTheClientWhatTheLastAttemptWas) {
  fixture f;
  retry_step step({f.policy, f.facts, f.log, f.rng, f.gate, f.observer}, t0 + 30s);
  step.drain_cut("503");
  ASSERT_TRUE(step.result().failure);
  EXPECT_EQ(step.result().failure->type, error_type::deadline_exceeded);
  EXPECT_NE(step.result().failure->message.find("answered 503"), std::string::npos);
  ASSERT_EQ(f.observer.ends.size(), 1u);
  EXPECT_EQ(f.observer.ends[0].how, call_end::failure);
}

TEST(RetryStep, AHedgeCancelledCopyIsCountedButNeverReachesTheBreaker) {
  fixture f;
  record_attempt(f.gate, f.observer, {2, {}, 5ms, true});
  EXPECT_EQ(f.observer.reports.size(), 1u);
  EXPECT_EQ(f.gate.recorded, 0u);
  record_attempt(f.gate, f.observer, {3, error(error_type::connect_reset), 5ms});
  EXPECT_EQ(f.gate.recorded, 1u);
  EXPECT_EQ(f.gate.failures, 1u);
}

TEST(RetryStep, TheBreakerCountsR4FailuresWhateverRetryOnNarrows) {
  fixture f;
  f.policy.retry_on = retry_on::none();
  f.policy.retry_on.add(retry_on::cls::connect_refused);
  f.run({.name = "503 outside retry_on", .outcome = status(503)});
  EXPECT_EQ(f.gate.failures, 1u) << "a 503 is a transient failure for the breaker even when not retried";
}

// Issue 51: a retry needs room in the concurrency limit, asked before the budget, so a retry
// the limit has no room for spends none; the client gets the last answer, or the limit's 503.
TEST(RetryStep, ARetryWithoutRoomInTheConcurrencyLimitIsNotScheduledAndSpendsNoBudget) {
  fixture f;
  concurrency_lane lane(retry_test::fixed_concurrency(1), 1, 1);
  auto held = lane.take();  // another request holds the only slot
  ASSERT_TRUE(held.held());
  retry_step step({f.policy, f.facts, f.log, f.rng, f.gate, f.observer, true, nullptr, &lane}, t0 + 30s);
  step.attempt_made();
  attempt_summary s;
  s.failure = retry::attempt_failure{error_type::connect_reset, "scripted"};
  f.facts.may_retry = true;
  auto const next = step.after(s, t0, {t0 + 10ms, wall}, false);
  EXPECT_FALSE(next.retry);
  EXPECT_EQ(f.gate.asked, 0u) << "the budget is not charged for a retry that cannot go";
  ASSERT_TRUE(step.result().failure);
  EXPECT_EQ(step.result().failure->type, error_type::concurrency_limited);
  EXPECT_EQ(f.count("\"retry_suppressed\""), 1u) << f.log_text.str();
  held.release(false);
  retry_step again({f.policy, f.facts, f.log, f.rng, f.gate, f.observer, true, nullptr, &lane}, t0 + 30s);
  again.attempt_made();
  EXPECT_TRUE(again.after(s, t0, {t0 + 10ms, wall}, false).retry) << "with room the same failure is retried";
  EXPECT_EQ(f.gate.asked, 1u);
}

TEST(RetryStep, LimitedEndsTheRequestAs503ConcurrencyLimitedNothingSent) {
  fixture f;
  retry_step step({f.policy, f.facts, f.log, f.rng, f.gate, f.observer}, t0 + 30s);
  step.limited();
  ASSERT_TRUE(step.result().failure);
  EXPECT_EQ(step.result().failure->type, error_type::concurrency_limited);
  EXPECT_FALSE(step.result().failure->may_have_reached);
  EXPECT_EQ(step.result().attempts, 0u);
  EXPECT_EQ(default_status(error_type::concurrency_limited), 503u);
  EXPECT_EQ(default_retry_after_s(error_type::concurrency_limited), 1u);
  EXPECT_EQ(f.gate.recorded, 0u) << "a refusal by the limit is no failure of the dependency";
  ASSERT_EQ(f.observer.ends.size(), 1u);
  EXPECT_EQ(f.observer.ends[0].how, call_end::failure);
}

}  // namespace step_test
