// Async delivery's decisions as values (R-3 async, R-7, R-8): what one attempt makes of a
// task, how long a held-back task waits, and where each leaves it. The Async and Fleet
// integration tests run the same rules through real stores, upstreams and SIGKILLs.
#include "proxy/delivery/task_step.hpp"

#include <gtest/gtest.h>

namespace task_step_test {
namespace {

using namespace rebound;
using namespace rebound::delivery;
using namespace std::chrono_literals;
using store::task_status;

retry::policy webhook_policy() {
  retry::policy p;
  p.backoff.base = 100ms;
  p.backoff.cap = 30s;
  return p;
}

retry::attempt_summary answered(unsigned status) {
  retry::attempt_summary s;
  s.outcome.status = status;
  return s;
}

wall::time_point const now = wall::time_point(std::chrono::hours(24 * 365 * 56));

TEST(TaskStep, R1_ARetryIsStoredDueAfterTheWaitTheStepDrew) {
  retry::next_step next;
  next.retry = true;
  next.wait = 1500ms;
  auto const judged = judge(next, answered(503), webhook_policy(), now);
  EXPECT_EQ(judged.status, task_status::pending);
  EXPECT_EQ(judged.at, now + 1500ms);
}

TEST(TaskStep, R3_ASuccessEndsTheTaskAndAFinalFailureDeadLettersItNamingTheOutcome) {
  retry::next_step next;
  next.stopped = retry::stop_reason::final;
  EXPECT_EQ(judge(next, answered(204), webhook_policy(), now).status, task_status::succeeded);
  auto const refused = judge(next, answered(422), webhook_policy(), now);
  EXPECT_EQ(refused.status, task_status::dead_lettered);
  EXPECT_EQ(refused.reason, "http_422");
  retry::attempt_summary cut;
  cut.failure = retry::attempt_failure{retry::error_type::tls_certificate, "bad certificate"};
  EXPECT_EQ(judge(next, cut, webhook_policy(), now).reason, "tls_certificate");
}

TEST(TaskStep, R2_ATaskThatRanOutOfRetriesOrTimeIsDeadLetteredWithTheStopsReason) {
  retry::next_step next;
  next.stopped = retry::stop_reason::exhausted;
  auto const judged = judge(next, answered(503), webhook_policy(), now);
  EXPECT_EQ(judged.status, task_status::dead_lettered);
  EXPECT_EQ(judged.reason, "exhausted");
  next.stopped = retry::stop_reason::deadline;
  EXPECT_EQ(judge(next, answered(503), webhook_policy(), now).reason, "deadline_exceeded");
}

TEST(TaskStep, ADrainThatCutTheStepLeavesTheTaskDueAfterTheBackoffCap) {
  retry::next_step const cut{};  // neither a retry nor a stop: only a drain says that to delivery
  auto const judged = judge(cut, answered(503), webhook_policy(), now);
  EXPECT_EQ(judged.status, task_status::pending);
  EXPECT_EQ(judged.at, now + 30s);
}

TEST(TaskStep, R7_AHeldBackTaskWaitsTheBreakersTimeOrTheBackoffCapNeverCountedAnAttempt) {
  auto const policy = webhook_policy();
  EXPECT_EQ(postponement_for(held_back::breaker_open, 7s, 3, policy, 0.5), 7000ms);
  EXPECT_EQ(postponement_for(held_back::budget_spent, 7s, 3, policy, 0.5), 30000ms);
  EXPECT_EQ(to_string(held_back::budget_spent), "budget or circuit breaker (R-7)");
}

TEST(TaskStep, AtTheConcurrencyLimitATaskWaitsItsOwnNextBackoffDrawnWithFullJitter) {
  auto const policy = webhook_policy();
  // The 4th attempt's full-jitter window is [0, min(cap, base * 2^3)] = [0, 800 ms].
  EXPECT_EQ(postponement_for(held_back::concurrency_limit, 0s, 3, policy, 0.0), 0ms);
  EXPECT_EQ(postponement_for(held_back::concurrency_limit, 0s, 3, policy, 0.5), 400ms);
  EXPECT_LE(postponement_for(held_back::concurrency_limit, 0s, 3, policy, 0.999), 800ms);
  EXPECT_EQ(to_string(held_back::concurrency_limit), "concurrency limit");
}

TEST(TaskStep, R8_ADeadLetterRaisesTheAlertAndAnAlertThatRanOutEndsExhausted) {
  auto const dead = end_of(task_status::dead_lettered, false);
  EXPECT_EQ(dead.status, task_status::dead_lettered);
  EXPECT_TRUE(dead.raise_alert);
  EXPECT_TRUE(dead.ended);
  // A failing alert must not raise another.
  auto const alert = end_of(task_status::dead_lettered, true);
  EXPECT_EQ(alert.status, task_status::exhausted);
  EXPECT_FALSE(alert.raise_alert);
}

TEST(TaskStep, ADeliveredTaskEndsAndAPendingOneNeitherEndsNorAlerts) {
  auto const delivered = end_of(task_status::succeeded, false);
  EXPECT_TRUE(delivered.ended);
  auto const again = end_of(task_status::pending, false);
  EXPECT_FALSE(again.ended);
  EXPECT_FALSE(again.raise_alert);
}

}  // namespace
}  // namespace task_step_test
