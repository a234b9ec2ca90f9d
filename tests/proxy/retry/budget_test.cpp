#include "proxy/retry/budget.hpp"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

using namespace rebound;
using namespace std::chrono_literals;
using retry::retry_budget;

namespace budget_test {
namespace {

retry_budget::time_point at(std::chrono::milliseconds ms) { return retry_budget::time_point{} + 1000h + ms; }

retry::budget_policy strict(double ratio = 0.2, std::chrono::milliseconds window = 30s) {
  retry::budget_policy p;
  p.ratio = ratio;
  p.window = window;
  p.min_retries = 0;
  return p;
}

}  // namespace

TEST(Budget, R7_RetriesAreAtMostRatioOfOriginals) {
  retry_budget b(strict());
  for (int i = 0; i < 100; ++i) b.deposit(at(0ms));
  int spent = 0;
  while (b.try_withdraw(at(1ms))) ++spent;
  EXPECT_EQ(spent, 20);
  auto u = b.in_window(at(2ms));
  EXPECT_EQ(u.requests, 100u);
  EXPECT_EQ(u.retries, 20u);
  EXPECT_EQ(u.allowed, 20u);
  EXPECT_DOUBLE_EQ(u.utilization(), 1.0);
}

TEST(Budget, R7_StrictBudgetAllowsNoRetryBeforeEnoughOriginals) {
  retry_budget b(strict());
  for (int i = 0; i < 4; ++i) b.deposit(at(0ms));
  EXPECT_FALSE(b.try_withdraw(at(0ms))) << "0.2 x 4 originals is less than one retry";
  b.deposit(at(0ms));
  EXPECT_TRUE(b.try_withdraw(at(0ms)));
  EXPECT_FALSE(b.try_withdraw(at(0ms)));
}

TEST(Budget, R7_MinRetriesAreAllowedPerWindowWithoutOriginals) {
  retry::budget_policy p;
  p.min_retries = 3;
  retry_budget b(p);
  EXPECT_TRUE(b.try_withdraw(at(0ms)));
  EXPECT_TRUE(b.try_withdraw(at(0ms)));
  EXPECT_TRUE(b.try_withdraw(at(0ms)));
  EXPECT_FALSE(b.try_withdraw(at(0ms)));
  // The floor is per window, not added to the ratio: 100 originals allow max(3, 20).
  for (int i = 0; i < 100; ++i) b.deposit(at(1ms));
  EXPECT_EQ(b.in_window(at(1ms)).allowed, 20u);
}

TEST(Budget, R7_OldSlotsExpireWithTheWindow) {
  retry_budget b(strict(0.2, 10s));
  for (int i = 0; i < 50; ++i) b.deposit(at(0ms));
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(b.try_withdraw(at(0ms)));
  EXPECT_FALSE(b.try_withdraw(at(5s)));
  // One full window later both the originals and the retries have left it.
  auto u = b.in_window(at(10s));
  EXPECT_EQ(u.requests, 0u);
  EXPECT_EQ(u.retries, 0u);
  EXPECT_FALSE(b.try_withdraw(at(10s)));
  for (int i = 0; i < 5; ++i) b.deposit(at(10s));
  EXPECT_TRUE(b.try_withdraw(at(10s)));
}

TEST(Budget, R7_WindowRollsBucketByBucket) {
  retry_budget b(strict(1.0, 10s));  // buckets of 1 s
  b.deposit(at(0ms));
  b.deposit(at(4500ms));
  EXPECT_EQ(b.in_window(at(9999ms)).requests, 2u);
  EXPECT_EQ(b.in_window(at(10s)).requests, 1u) << "the first bucket has left the window";
  // The window is the current bucket and the nine before it: at 13.x s that is [4 s, 14 s).
  EXPECT_EQ(b.in_window(at(13999ms)).requests, 1u);
  EXPECT_EQ(b.in_window(at(14s)).requests, 0u);
}

TEST(Budget, R7_ABucketReusedAfterAWindowStartsFromZero) {
  retry_budget b(strict(1.0, 10s));
  for (int i = 0; i < 7; ++i) b.deposit(at(0ms));
  b.deposit(at(10s));  // the same slot of the ring, one window later
  EXPECT_EQ(b.in_window(at(10s)).requests, 1u);
}

TEST(Budget, UtilizationIsRetriesOverAllowed) {
  retry_budget b(strict(0.5));
  for (int i = 0; i < 8; ++i) b.deposit(at(0ms));
  ASSERT_TRUE(b.try_withdraw(at(0ms)));
  EXPECT_DOUBLE_EQ(b.in_window(at(0ms)).utilization(), 0.25);
  retry_budget quiet(strict());
  EXPECT_DOUBLE_EQ(quiet.in_window(at(0ms)).utilization(), 0.0);
}

TEST(Budget, R7_ConcurrentWorkersOvershootByAtMostOneRetryEach) {
  retry_budget b(strict());
  for (int i = 0; i < 1000; ++i) b.deposit(at(0ms));
  constexpr int threads = 4;
  std::vector<std::thread> ts;
  std::atomic<int> spent{0};
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&] {
      for (int i = 0; i < 500; ++i)
        if (b.try_withdraw(at(1ms))) spent.fetch_add(1);
    });
  for (auto& t : ts) t.join();
  EXPECT_GE(spent.load(), 200);
  EXPECT_LE(spent.load(), 200 + threads);
  EXPECT_EQ(b.in_window(at(1ms)).retries, static_cast<std::uint64_t>(spent.load()));
}

}  // namespace budget_test
