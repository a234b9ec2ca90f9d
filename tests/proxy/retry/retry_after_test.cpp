#include "proxy/retry/retry_after.hpp"

#include <gtest/gtest.h>

using namespace rebound::retry;
using namespace std::chrono_literals;
using rebound::retry::error_type;

namespace retry_after_test {
namespace {
// Sun, 06 Nov 1994 08:49:00 GMT
const auto now = std::chrono::system_clock::from_time_t(784111740);
}  // namespace

TEST(RetryAfter, R5_DeltaSeconds) {
  EXPECT_EQ(parse_retry_after("120", now), 120s);
  EXPECT_EQ(parse_retry_after(" 0 ", now), 0s);
  EXPECT_FALSE(parse_retry_after("-1", now));
  EXPECT_FALSE(parse_retry_after("1.5", now));
  EXPECT_FALSE(parse_retry_after("", now));
  EXPECT_FALSE(parse_retry_after("soon", now));
}

TEST(RetryAfter, R5_HugeDeltaIsAVeryLongWaitNotAnError) {
  auto r = parse_retry_after("99999999999999999999999", now);
  ASSERT_TRUE(r);
  EXPECT_GT(*r, std::chrono::hours(24 * 365));
}

TEST(RetryAfter, R5_HttpDateInAllThreeForms) {
  EXPECT_EQ(parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", now), 37s);
  EXPECT_EQ(parse_retry_after("Sunday, 06-Nov-94 08:49:37 GMT", now), 37s);
  EXPECT_EQ(parse_retry_after("Sun Nov  6 08:49:37 1994", now), 37s);
}

// Found by fuzz/fuzz_retry_after: a date past 2262 overflowed system_clock (undefined behaviour).
TEST(RetryAfter, R5_DateBeyondTheClocksRangeIsAVeryLongWaitNotAnOverflow) {
  for (auto far : {"Wed, 21 Oct 4198 07:28:00 GMT", "Fri Dec 31 23:59:59 9999"}) {
    auto r = parse_retry_after(far, now);
    ASSERT_TRUE(r) << far;
    EXPECT_GT(*r, std::chrono::hours(24 * 365)) << far;
  }
}

TEST(RetryAfter, R5_DateInThePastMeansNoWait) {
  EXPECT_EQ(parse_retry_after("Sun, 06 Nov 1994 08:00:00 GMT", now), 0s);
}

TEST(RetryAfter, R5_MalformedDatesAreIgnored) {
  for (auto bad : {"Sun, 06 Nov 1994 08:49:37", "Sun, 6 Nov 1994 08:49:37 GMT", "Sun, 06 Foo 1994 08:49:37 GMT",
                   "Sun, 06 Nov 1994 25:49:37 GMT", "Sun Nov  6 08:49:37 1994 extra"})
    EXPECT_FALSE(parse_retry_after(bad, now)) << bad;
}

TEST(RetryAfter, R5_LongerRetryAfterTakesPrecedenceOverBackoff) {
  auto p = plan_wait(200ms, 2s, 10s, 100ms);
  EXPECT_TRUE(p.retry);
  EXPECT_EQ(p.wait, 2s);
  auto q = plan_wait(3s, 2s, 10s, 100ms);
  EXPECT_EQ(q.wait, 3s);
}

TEST(RetryAfter, R5_RetryAfterBeyondDeadlineFailsAtOnce) {
  auto p = plan_wait(200ms, 30s, 10s, 100ms);
  EXPECT_FALSE(p.retry);
  EXPECT_EQ(p.why_not, error_type::retry_after_exceeds_deadline);
}

TEST(RetryAfter, R3_NoRetryWhenTheWaitLeavesNoTimeForAnAttempt) {
  auto p = plan_wait(950ms, std::nullopt, 1s, 100ms);
  EXPECT_FALSE(p.retry);
  EXPECT_EQ(p.why_not, error_type::deadline_exceeded);
  EXPECT_TRUE(plan_wait(850ms, std::nullopt, 1s, 100ms).retry);
}

}  // namespace retry_after_test
