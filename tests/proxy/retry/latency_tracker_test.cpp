#include "proxy/retry/latency_tracker.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

using namespace rebound::retry;
using namespace std::chrono_literals;
using us = std::chrono::microseconds;

namespace latency_tracker_test {
namespace {
const auto t0 = std::chrono::steady_clock::time_point(100s);
}

TEST(LatencyTracker, BucketsAreLogScaleAndBoundTheirSamples) {
  EXPECT_EQ(latency_tracker::bucket_of(us(0)), 0u);
  EXPECT_EQ(latency_tracker::bucket_of(us(100)), 0u);
  for (auto const v : {us(101), us(999), us(20'000), us(500'000), us(3'000'000)}) {
    auto const b = latency_tracker::bucket_of(v);
    EXPECT_GE(latency_tracker::upper_bound(b), v) << v.count();
    EXPECT_LT(latency_tracker::upper_bound(b - 1), v) << v.count();
    // Within a quarter doubling: a quantile is read to within 19%.
    EXPECT_LE(latency_tracker::upper_bound(b).count(), v.count() * 1.19 + 1) << v.count();
  }
  EXPECT_EQ(latency_tracker::bucket_of(std::chrono::hours(1)), latency_tracker::bucket_count - 1);
}

TEST(LatencyTracker, NoAnswerBeforeEnoughSamples) {
  latency_tracker t;
  for (unsigned i = 0; i + 1 < latency_tracker::min_samples; ++i) t.record(us(1000), t0);
  EXPECT_FALSE(t.quantile(0.95, t0));
  t.record(us(1000), t0);
  ASSERT_TRUE(t.quantile(0.95, t0));
}

TEST(LatencyTracker, P95OfAMostlyFastDependency) {
  latency_tracker t;
  // 94 fast (1 ms), 6 slow (500 ms): the 95th sample is slow.
  for (int i = 0; i < 94; ++i) t.record(us(1000), t0);
  for (int i = 0; i < 6; ++i) t.record(us(500'000), t0 + 10ms);
  auto const p95 = t.quantile(0.95, t0 + 20ms);
  ASSERT_TRUE(p95);
  EXPECT_GE(*p95, us(500'000));
  EXPECT_LE(*p95, us(600'000));
  auto const p50 = t.quantile(0.5, t0 + 20ms);
  ASSERT_TRUE(p50);
  EXPECT_GE(*p50, us(1000));
  EXPECT_LE(*p50, us(1200));
}

TEST(LatencyTracker, SamplesLeaveTheWindow) {
  latency_tracker t(10s);  // 5 slices of 2 s
  for (int i = 0; i < 50; ++i) t.record(us(400'000), t0);
  EXPECT_EQ(t.samples(t0 + 9s), 50u);
  EXPECT_EQ(t.samples(t0 + 11s), 0u);
  EXPECT_FALSE(t.quantile(0.95, t0 + 11s));
  // A slice reused by a later epoch starts from zero.
  for (int i = 0; i < 30; ++i) t.record(us(2000), t0 + 10s);
  auto const p95 = t.quantile(0.95, t0 + 10s);
  ASSERT_TRUE(p95);
  EXPECT_LT(*p95, us(3000));
}

TEST(LatencyTracker, WorkersRecordAtOnceWithoutLosingTheShape) {
  latency_tracker t;
  std::vector<std::thread> workers;
  for (int w = 0; w < 4; ++w)
    workers.emplace_back([&t] {
      for (int i = 0; i < 1000; ++i) t.record(i % 20 == 0 ? us(200'000) : us(800), t0 + std::chrono::milliseconds(i));
    });
  for (auto& w : workers) w.join();
  EXPECT_EQ(t.samples(t0 + 1s), 4000u);
  auto const p50 = t.quantile(0.5, t0 + 1s);
  ASSERT_TRUE(p50);
  EXPECT_LT(*p50, us(1000));
}

// Writers that move into new slices (clearing stale ones) while a reader reads: TSan's case.
TEST(LatencyTracker, ReadersAndWritersAcrossSlicesAtOnce) {
  latency_tracker t(std::chrono::milliseconds(50));  // 10 ms slices
  std::atomic<bool> done{false};
  std::thread reader([&] {
    while (!done.load()) (void)t.quantile(0.95, t0 + 1s);
  });
  std::vector<std::thread> workers;
  for (int w = 0; w < 3; ++w)
    workers.emplace_back([&t] {
      for (int i = 0; i < 3000; ++i) t.record(us(1000 + i), t0 + std::chrono::milliseconds(i / 3));
    });
  for (auto& w : workers) w.join();
  done = true;
  reader.join();
  // Only the last 50 ms (the last 150 or so records of each worker) are still counted.
  EXPECT_LE(t.samples(t0 + 999ms), 3u * 3u * 60u);
  EXPECT_GT(t.samples(t0 + 999ms), 0u);
}

}  // namespace latency_tracker_test
