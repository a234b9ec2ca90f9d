#include "proxy/retry/policy.hpp"

#include <gtest/gtest.h>

using namespace rebound::retry;
using namespace std::chrono_literals;

namespace policy_test {

// R-2's table (default retries, allowed range) and R-3's (total time, its cap) per context.
TEST(RetryPolicy, R2_R3_EachContextHasItsRowOfTheStandard) {
  struct row {
    context_kind c;
    unsigned retries, low, high;
    duration total, cap;
  };
  for (auto const& r : {row{context_kind::sync, 3, 1, 5, 30s, 30s}, row{context_kind::async, 5, 1, 10, 24h, 24h},
                        row{context_kind::webhook, 5, 3, 8, 24h, 24h}, row{context_kind::batch, 3, 1, 5, 30s, 24h},
                        row{context_kind::grpc, 3, 1, 5, 30s, 30s}}) {
    SCOPED_TRACE(std::string(to_string(r.c)));
    EXPECT_EQ(builtin_max_retries(r.c), r.retries);
    EXPECT_EQ(allowed_retries(r.c).low, r.low);
    EXPECT_EQ(allowed_retries(r.c).high, r.high);
    EXPECT_EQ(builtin_total_timeout(r.c), r.total);
    EXPECT_EQ(max_total_timeout(r.c), r.cap);
  }
}

TEST(RetryPolicy, R3_OnlyAWebhookFollowsTheStandardsTableByDefault) {
  EXPECT_EQ(builtin_schedule(context_kind::webhook), (std::vector<duration>{1s, 5s, 30s, 2min, 15min, 1h, 4h}));
  for (auto c : {context_kind::sync, context_kind::async, context_kind::batch, context_kind::grpc})
    EXPECT_TRUE(builtin_schedule(c).empty()) << to_string(c);
}

TEST(RetryPolicy, R6_OnlyTheIdempotentMethodsAreSoByThemselvesCaseSensitive) {
  for (auto const* m : {"GET", "HEAD", "OPTIONS", "PUT", "DELETE"}) EXPECT_TRUE(idempotent_method(m)) << m;
  for (auto const* m : {"POST", "PATCH", "CONNECT", "TRACE", "get", ""}) EXPECT_FALSE(idempotent_method(m)) << m;
}

TEST(RetryPolicy, R8_OnlyTheAsyncContextsHandCallsOver) {
  EXPECT_TRUE(hands_over_calls(context_kind::async));
  EXPECT_TRUE(hands_over_calls(context_kind::webhook));
  EXPECT_TRUE(hands_over_calls(context_kind::batch));
  EXPECT_FALSE(hands_over_calls(context_kind::sync));
  EXPECT_FALSE(hands_over_calls(context_kind::grpc));
}

TEST(RetryPolicy, EnumsAreSpelledAsInTheYaml) {
  EXPECT_EQ(to_string(context_kind::webhook), "webhook");
  EXPECT_EQ(to_string(breaker_mode::signal), "signal");
  EXPECT_EQ(to_string(concurrency_mode::adaptive), "adaptive");
  EXPECT_EQ(to_string(concurrency_mode::off), "off");
}

}  // namespace policy_test
