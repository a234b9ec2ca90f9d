#include "proxy/retry/breaker.hpp"

#include <gtest/gtest.h>

using namespace rebound;
using namespace std::chrono_literals;
using retry::breaker_state;
using retry::circuit_breaker;

namespace breaker_test {
namespace {

circuit_breaker::time_point at(std::chrono::milliseconds ms) { return circuit_breaker::time_point{} + 1000h + ms; }

retry::breaker_policy small(retry::breaker_mode mode = retry::breaker_mode::enforce) {
  retry::breaker_policy p;
  p.mode = mode;
  p.failure_ratio = 0.5;
  p.min_requests = 4;
  p.window = 10s;
  p.open_for = 1000ms;
  p.half_open_probes = 2;
  return p;
}

/// Fails `n` attempts at `t`; returns the transition the last one caused, if any.
std::optional<retry::breaker_transition> fail(circuit_breaker& b, int n, circuit_breaker::time_point t,
                                              double u = 0.5) {
  std::optional<retry::breaker_transition> last;
  for (int i = 0; i < n; ++i)
    if (auto tr = b.record(true, t, u)) last = tr;
  return last;
}

}  // namespace

// Found by the hardening review: a breaker that never changed state reported its time in
// state from the machine's boot (the steady clock's epoch), not from its creation.
TEST(Breaker, ABreakerThatNeverMovedIsInItsStateSinceItWasCreated) {
  circuit_breaker b(small(), at(5ms));
  EXPECT_EQ(b.since(), at(5ms));
}

TEST(Breaker, StaysClosedBelowMinRequests) {
  circuit_breaker b(small());
  EXPECT_FALSE(fail(b, 3, at(0ms)));
  EXPECT_EQ(b.state(), breaker_state::closed);
  EXPECT_TRUE(b.admit(at(1ms)).allowed);
  EXPECT_TRUE(b.allow_retry());
}

TEST(Breaker, OpensWhenFailureRatioReachedOverMinRequests) {
  circuit_breaker b(small());
  b.record(false, at(0ms), 0.5);
  b.record(false, at(0ms), 0.5);
  b.record(true, at(0ms), 0.5);
  EXPECT_EQ(b.state(), breaker_state::closed);  // 1 of 3
  auto t = b.record(true, at(0ms), 0.5);        // 2 of 4 = 0.5
  ASSERT_TRUE(t);
  EXPECT_EQ(t->from, breaker_state::closed);
  EXPECT_EQ(t->to, breaker_state::open);
  EXPECT_EQ(t->reason, "failure_ratio");
  EXPECT_EQ(b.state(), breaker_state::open);
  EXPECT_EQ(b.since(), at(0ms));
}

TEST(Breaker, SuccessesKeepItClosed) {
  circuit_breaker b(small());
  for (int i = 0; i < 10; ++i) b.record(false, at(0ms), 0.5);
  EXPECT_FALSE(fail(b, 4, at(1ms)));  // 4 of 14
  EXPECT_EQ(b.state(), breaker_state::closed);
}

TEST(Breaker, FailuresOlderThanTheWindowDoNotCount) {
  circuit_breaker b(small());
  fail(b, 3, at(0ms));
  EXPECT_FALSE(fail(b, 1, at(11s)));  // the first three left the window
  EXPECT_EQ(b.state(), breaker_state::closed);
}

TEST(Breaker, OpenFailsFastWithTheTimeLeftThenLetsAProbeThrough) {
  circuit_breaker b(small());
  fail(b, 4, at(0ms), 0.5);  // open_for 1000 ms x (0.9 + 0.2 x 0.5) = 1000 ms
  auto d = b.admit(at(400ms));
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after, 600ms);
  EXPECT_FALSE(b.allow_retry());

  d = b.admit(at(1000ms));
  EXPECT_TRUE(d.allowed);
  ASSERT_TRUE(d.transition);
  EXPECT_EQ(d.transition->from, breaker_state::open);
  EXPECT_EQ(d.transition->to, breaker_state::half_open);
  EXPECT_EQ(b.state(), breaker_state::half_open);
  EXPECT_FALSE(b.allow_retry());  // probes get one attempt each
}

TEST(Breaker, OpenForIsJitteredByTenPercent) {
  circuit_breaker low(small()), high(small());
  fail(low, 4, at(0ms), 0.0);     // 900 ms
  fail(high, 4, at(0ms), 0.999);  // just under 1100 ms
  EXPECT_TRUE(low.admit(at(900ms)).allowed);
  EXPECT_FALSE(high.admit(at(1098ms)).allowed);
  EXPECT_TRUE(high.admit(at(1100ms)).allowed);
}

TEST(Breaker, HalfOpenAdmitsOnlyItsProbes) {
  circuit_breaker b(small());
  fail(b, 4, at(0ms));
  EXPECT_TRUE(b.admit(at(1000ms)).allowed);
  EXPECT_TRUE(b.admit(at(1001ms)).allowed);
  auto d = b.admit(at(1002ms));
  EXPECT_FALSE(d.allowed);
  EXPECT_GE(d.retry_after, 998ms);
}

TEST(Breaker, ClosesWhenEveryProbeSucceeded) {
  circuit_breaker b(small());
  fail(b, 4, at(0ms));
  b.admit(at(1000ms));
  b.admit(at(1000ms));
  EXPECT_FALSE(b.record(false, at(1010ms), 0.5));
  auto t = b.record(false, at(1020ms), 0.5);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->to, breaker_state::closed);
  EXPECT_EQ(t->reason, "probes succeeded");
  EXPECT_TRUE(b.admit(at(1030ms)).allowed);
  EXPECT_TRUE(b.allow_retry());
  // The failures that opened it are forgotten: one more failure does not reopen it.
  EXPECT_FALSE(fail(b, 1, at(1040ms)));
  EXPECT_EQ(b.state(), breaker_state::closed);
}

TEST(Breaker, AFailedProbeOpensItAgain) {
  circuit_breaker b(small());
  fail(b, 4, at(0ms));
  b.admit(at(1000ms));
  auto t = b.record(true, at(1010ms), 0.5);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->from, breaker_state::half_open);
  EXPECT_EQ(t->to, breaker_state::open);
  EXPECT_EQ(t->reason, "probe failed");
  auto d = b.admit(at(1500ms));
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after, 510ms);
}

TEST(Breaker, ProbesThatNeverReportAreReplacedAfterOpenFor) {
  circuit_breaker b(small());
  fail(b, 4, at(0ms));
  b.admit(at(1000ms));
  b.admit(at(1000ms));
  EXPECT_FALSE(b.admit(at(1500ms)).allowed);
  EXPECT_TRUE(b.admit(at(2000ms)).allowed);  // a new round
  EXPECT_TRUE(b.admit(at(2000ms)).allowed);
  EXPECT_FALSE(b.admit(at(2000ms)).allowed);
}

TEST(Breaker, AttemptsThatFinishWhileOpenChangeNothing) {
  circuit_breaker b(small());
  fail(b, 4, at(0ms));
  EXPECT_FALSE(b.record(false, at(10ms), 0.5));
  EXPECT_FALSE(b.record(true, at(10ms), 0.5));
  EXPECT_EQ(b.state(), breaker_state::open);
}

TEST(Breaker, R7_ExhaustedBudgetOpensItWhenConfigured) {
  circuit_breaker b(small());
  auto t = b.budget_exhausted(at(0ms), 0.5);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->reason, "budget_exhausted");
  EXPECT_EQ(b.state(), breaker_state::open);
  EXPECT_FALSE(b.budget_exhausted(at(1ms), 0.5));  // already open: one transition

  auto p = small();
  p.open_on_budget_exhausted = false;
  circuit_breaker keep(p);
  EXPECT_FALSE(keep.budget_exhausted(at(0ms), 0.5));
  EXPECT_EQ(keep.state(), breaker_state::closed);
}

TEST(Breaker, SignalModeChangesStateButNeverRefuses) {
  circuit_breaker b(small(retry::breaker_mode::signal));
  ASSERT_TRUE(fail(b, 4, at(0ms)));
  EXPECT_EQ(b.state(), breaker_state::open);
  EXPECT_TRUE(b.admit(at(10ms)).allowed);
  EXPECT_TRUE(b.allow_retry());
  auto d = b.admit(at(1000ms));
  EXPECT_TRUE(d.allowed);
  ASSERT_TRUE(d.transition);
  EXPECT_EQ(b.state(), breaker_state::half_open);
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(b.admit(at(1001ms)).allowed);
  b.record(false, at(1002ms), 0.5);
  ASSERT_TRUE(b.record(false, at(1002ms), 0.5));
  EXPECT_EQ(b.state(), breaker_state::closed);
}

TEST(Breaker, OffModeNeverChanges) {
  circuit_breaker b(small(retry::breaker_mode::off));
  EXPECT_FALSE(fail(b, 50, at(0ms)));
  EXPECT_FALSE(b.budget_exhausted(at(0ms), 0.5));
  EXPECT_EQ(b.state(), breaker_state::closed);
  EXPECT_TRUE(b.admit(at(1ms)).allowed);
}

}  // namespace breaker_test
