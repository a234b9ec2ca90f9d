// The time-dependent rules of hedging (retry/hedge.hpp), with time as a value: no sleeps.
#include "proxy/retry/hedge.hpp"

#include <gtest/gtest.h>

using namespace rebound;
using namespace rebound::retry;
using namespace std::chrono_literals;

namespace hedge_test {
namespace {
const auto t0 = std::chrono::steady_clock::time_point(100s);

retry::policy hedged(unsigned max, std::chrono::milliseconds after, bool p95 = false) {
  retry::policy p;
  p.attempt_timeout = 2s;
  p.hedge = {max, p95, after};
  return p;
}
}  // namespace

TEST(HedgePlan, OnlyForHedgeableRequestsOfAHedgedSyncPolicy) {
  EXPECT_EQ(plan_hedge(hedged(1, 50ms), false, std::nullopt).max, 0u);  // POST, or a body not kept
  EXPECT_EQ(plan_hedge(retry::policy{}, true, std::nullopt).max, 0u);   // off by default
  auto async = hedged(1, 50ms);
  async.context = retry::context_kind::async;
  EXPECT_EQ(plan_hedge(async, true, std::nullopt).max, 0u);
  auto const p = plan_hedge(hedged(2, 50ms), true, 300ms);
  EXPECT_EQ(p.max, 2u);
  EXPECT_EQ(p.delay, 50ms);  // a fixed delay ignores what was observed
  EXPECT_EQ(p.source, hedge_delay_source::fixed);
}

TEST(HedgePlan, P95UsesTheObservedLatencyElseHalfTheAttemptTimeout) {
  auto const seen = plan_hedge(hedged(1, 0ms, true), true, 37ms);
  EXPECT_EQ(seen.delay, 37ms);
  EXPECT_EQ(seen.source, hedge_delay_source::p95);
  auto const early = plan_hedge(hedged(1, 0ms, true), true, std::nullopt);
  EXPECT_EQ(early.delay, 1s);
  EXPECT_EQ(early.source, hedge_delay_source::fallback);
  EXPECT_EQ(plan_hedge(hedged(1, 0ms, true), true, 0ms).delay, 1ms);
}

TEST(HedgePlan, HedgesCountAgainstMaxRetries) {
  hedge_plan p{3, 50ms, hedge_delay_source::fixed};
  EXPECT_EQ(hedges_allowed(p, 3, 1), 3u);  // first attempt: 3 retries left
  EXPECT_EQ(hedges_allowed(p, 2, 1), 2u);
  EXPECT_EQ(hedges_allowed(p, 3, 3), 1u);  // a retry run after two attempts
  EXPECT_EQ(hedges_allowed(p, 3, 4), 0u);  // the last attempt allowed: no hedge
  EXPECT_EQ(hedges_allowed(p, 1, 5), 0u);
}

TEST(HedgeTiming, HedgesAreDueDelayApart) {
  auto const deadline = t0 + 2s;
  EXPECT_EQ(next_hedge_at(t0, 50ms, 0, 2, deadline), t0 + 50ms);
  EXPECT_EQ(next_hedge_at(t0, 50ms, 1, 2, deadline), t0 + 100ms);
  EXPECT_EQ(next_hedge_at(t0, 50ms, 2, 2, deadline), std::nullopt);  // all sent
  EXPECT_EQ(next_hedge_at(t0, 50ms, 0, 0, deadline), std::nullopt);  // none allowed
}

TEST(HedgeTiming, NoHedgeThatCouldNotFinishBeforeTheDeadline) {
  EXPECT_EQ(next_hedge_at(t0, 1960ms, 0, 1, t0 + 2s), std::nullopt);  // 40 ms left < min_attempt_time
  EXPECT_EQ(next_hedge_at(t0, 1950ms, 0, 1, t0 + 2s), t0 + 1950ms);
}

TEST(HedgeRace, AGoodOrFinalAnswerWinsARetryableFailureWaitsForTheOthers) {
  auto const r4 = retry_on::r4_default();
  EXPECT_EQ(after_copy({200, {}}, r4, 1), race_move::win);
  EXPECT_EQ(after_copy({404, {}}, r4, 1), race_move::win);  // final: not retried, so no waiting either
  EXPECT_EQ(after_copy({std::nullopt, error_type::tls_certificate}, r4, 1), race_move::win);  // at once
  EXPECT_EQ(after_copy({503, {}}, r4, 1), race_move::wait_for_others);
  EXPECT_EQ(after_copy({std::nullopt, error_type::connect_refused}, r4, 2), race_move::wait_for_others);
  EXPECT_EQ(after_copy({503, {}}, r4, 0), race_move::last_failure);
  // The route's retry_on narrows what counts as retryable, as for the retry decision.
  auto only_503 = retry_on::none();
  only_503.add(*retry_on::parse("503").value);
  EXPECT_EQ(after_copy({500, {}}, only_503, 1), race_move::win);
}

}  // namespace hedge_test
