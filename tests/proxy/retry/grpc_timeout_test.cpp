#include "proxy/retry/grpc_timeout.hpp"

#include <gtest/gtest.h>

using namespace rebound::retry;
using namespace std::chrono_literals;

TEST(GrpcTimeout, EveryUnitOfTheProtocolIsRead) {
  EXPECT_EQ(parse_grpc_timeout("2H"), std::chrono::microseconds(2h));
  EXPECT_EQ(parse_grpc_timeout("3M"), std::chrono::microseconds(3min));
  EXPECT_EQ(parse_grpc_timeout("10S"), std::chrono::microseconds(10s));
  EXPECT_EQ(parse_grpc_timeout("250m"), std::chrono::microseconds(250ms));
  EXPECT_EQ(parse_grpc_timeout("1500u"), 1500us);
  EXPECT_EQ(parse_grpc_timeout("99999999n"), 99999us);
  EXPECT_EQ(parse_grpc_timeout("0m"), 0us);
}

TEST(GrpcTimeout, MalformedValuesAreIgnored) {
  for (std::string_view bad : {"", "m", "10", "10x", "-1S", "123456789S", "1.5S", " 1S", "1 S"})
    EXPECT_FALSE(parse_grpc_timeout(bad)) << bad;
}

// Each attempt tells the server the time the call has left, never nothing at all.
TEST(GrpcTimeout, RemainingTimeIsSentInMilliseconds) {
  EXPECT_EQ(format_grpc_timeout(1234567us), "1234m");
  EXPECT_EQ(format_grpc_timeout(10us), "1m");
  EXPECT_EQ(format_grpc_timeout(-5ms), "1m");
  EXPECT_EQ(format_grpc_timeout(std::chrono::microseconds(200h)), "720000S");
  EXPECT_EQ(parse_grpc_timeout(format_grpc_timeout(250ms)), std::chrono::microseconds(250ms));
}

// Issue 29, defect 13: 2562048H and more (valid: 8 digits) overflowed the steady clock's
// time_point into the past, so the call failed at once with DEADLINE_EXCEEDED.
TEST(GrpcTimeout, HugeValidTimeoutsAreCappedSoADeadlineStaysInTheFuture) {
  for (auto const* v : {"2562048H", "99999999H", "99999999M", "99999999S"}) {
    auto const t = parse_grpc_timeout(v);
    ASSERT_TRUE(t) << v;
    EXPECT_LE(*t, longest_grpc_timeout) << v;
    EXPECT_GT(std::chrono::steady_clock::now() + *t, std::chrono::steady_clock::now() + std::chrono::hours(24 * 365))
        << v << ": the deadline is far in the future, not in the past";
  }
  EXPECT_EQ(parse_grpc_timeout("2H"), std::chrono::microseconds(std::chrono::hours(2))) << "ordinary values are exact";
}
