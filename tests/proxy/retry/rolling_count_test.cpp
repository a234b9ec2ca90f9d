#include "proxy/retry/rolling_count.hpp"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

using namespace std::chrono_literals;
using rebound::retry::rolling_count;

namespace rolling_count_test {
namespace {
rolling_count::time_point at(std::chrono::milliseconds ms) { return rolling_count::time_point{} + 1000h + ms; }
}  // namespace

TEST(RollingCount, CountsEventsInsideTheWindowOnly) {
  rolling_count c(10s);  // buckets of 1 s
  c.add(at(0ms));
  c.add(at(500ms));
  c.add(at(5s));
  EXPECT_EQ(c.in_window(at(5s)), 3u);
  EXPECT_EQ(c.in_window(at(9999ms)), 3u);
  EXPECT_EQ(c.in_window(at(10s)), 1u);  // the first bucket left the window
  EXPECT_EQ(c.in_window(at(15s)), 0u);
}

TEST(RollingCount, AReusedBucketStartsAfresh) {
  rolling_count c(10s);
  for (int i = 0; i < 7; ++i) c.add(at(100ms));
  c.add(at(10100ms));  // same slot of the ring, ten seconds later
  EXPECT_EQ(c.in_window(at(10100ms)), 1u);
}

TEST(RollingCount, AnEventFromAnotherThreadsFutureIsNotCountedEarly) {
  rolling_count c(10s);
  c.add(at(3s));
  EXPECT_EQ(c.in_window(at(1s)), 0u);
  EXPECT_EQ(c.in_window(at(3s)), 1u);
}

TEST(RollingCount, ClearForgetsEverything) {
  rolling_count c(10s);
  for (int i = 0; i < 5; ++i) c.add(at(1s));
  c.clear();
  EXPECT_EQ(c.in_window(at(1s)), 0u);
  c.add(at(1s));
  EXPECT_EQ(c.in_window(at(1s)), 1u);
}

TEST(RollingCount, ConcurrentAddsAreNotLost) {
  rolling_count c(10s);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) c.add(at(2s));
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(c.in_window(at(2s)), 40000u);
}

// Each thread counts in a ring of its own (a shared one bounced between the workers' cores):
// what another thread counted must age out, and be cleared, as if it were one ring.
TEST(RollingCount, AnotherThreadsCountsAgeAndClearAsOnesOwn) {
  rolling_count c(10s);
  std::thread([&] {
    for (int i = 0; i < 7; ++i) c.add(at(100ms));
  }).join();
  c.add(at(5s));
  EXPECT_EQ(c.in_window(at(5s)), 8u);
  c.add(at(10100ms));  // the other thread's bucket has left the window
  EXPECT_EQ(c.in_window(at(10100ms)), 2u);
  std::thread([&] { c.add(at(10100ms)); }).join();
  c.clear();
  EXPECT_EQ(c.in_window(at(10100ms)), 0u);
}

}  // namespace rolling_count_test
