#include "proxy/runtime/retry_buffer.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

using rebound::runtime::retry_buffer;

TEST(RetryBuffer, BodiesAreKeptWhileTheyFitAndTheirBytesComeBackWithTheLease) {
  retry_buffer b;
  auto first = b.take(600, 1000);
  ASSERT_TRUE(first);
  EXPECT_FALSE(b.take(500, 1000)) << "600 + 500 is past the limit: that body streams once";
  {
    auto second = b.take(400, 1000);
    EXPECT_TRUE(second) << "exactly at the limit fits";
    EXPECT_EQ(b.in_use(), 1000u);
  }
  EXPECT_EQ(b.in_use(), 600u);
  auto moved = std::move(first);
  EXPECT_EQ(b.in_use(), 600u) << "a moved lease is returned once";
  moved = {};
  EXPECT_EQ(b.in_use(), 0u);
  EXPECT_FALSE(b.take(2000, 1000)) << "a body larger than the whole budget never fits";
}

TEST(RetryBuffer, WorkersTakingAtOnceNeverPassTheLimit) {
  retry_buffer b;
  constexpr std::uint64_t limit = 64 * 1024;
  std::atomic<bool> over{false};
  std::vector<std::thread> workers;
  for (int w = 0; w < 4; ++w)
    workers.emplace_back([&] {
      for (int i = 0; i < 20'000; ++i) {
        auto l = b.take(1000, limit);
        if (b.in_use() > limit) over = true;
      }
    });
  for (auto& t : workers) t.join();
  EXPECT_FALSE(over);
  EXPECT_EQ(b.in_use(), 0u);
}
