#include "proxy/retry/backoff.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

using namespace rebound::retry;
using namespace std::chrono_literals;

TEST(Backoff, R1_FullJitterCeilingDoublesFromBaseUpToCap) {
  // u just below 1 shows the ceiling of each retry.
  double const top = std::nextafter(1.0, 0.0);
  EXPECT_EQ(full_jitter(1, 1s, 30s, top), 999ms);
  EXPECT_EQ(full_jitter(2, 1s, 30s, top), 1999ms);
  EXPECT_EQ(full_jitter(3, 1s, 30s, top), 3999ms);
  EXPECT_EQ(full_jitter(5, 1s, 30s, top), 15999ms);
  EXPECT_EQ(full_jitter(6, 1s, 30s, top), 29999ms);
  EXPECT_EQ(full_jitter(1000, 1s, 30s, top), 29999ms);  // no overflow far past the cap
}

TEST(Backoff, R1_FullJitterStartsAtZero) {
  for (unsigned n = 1; n < 10; ++n) EXPECT_EQ(full_jitter(n, 1s, 30s, 0.0), 0ms);
}

TEST(Backoff, R1_FullJitterIsUniformOverItsRange) {
  // Chi-square goodness of fit over 10 equal bins, 100k draws: with 9 degrees of freedom the
  // 99.9% critical value is 27.88. The generator is seeded, so the test is deterministic.
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  constexpr int draws = 100'000;
  constexpr int bins = 10;
  std::vector<int> count(bins, 0);
  for (int i = 0; i < draws; ++i) {
    auto const d = full_jitter(3, 1s, 30s, u01(rng));  // range [0, 4s)
    ASSERT_GE(d, 0ms);
    ASSERT_LT(d, 4s);
    ++count[static_cast<std::size_t>(d.count() * bins / 4000)];
  }
  double chi2 = 0;
  double const expected = double(draws) / bins;
  for (int c : count) chi2 += (c - expected) * (c - expected) / expected;
  EXPECT_LT(chi2, 27.88);
}

TEST(Backoff, R1_FullJitterMeanIsHalfTheCeiling) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  double sum = 0;
  constexpr int draws = 100'000;
  for (int i = 0; i < draws; ++i) sum += double(full_jitter(2, 1s, 30s, u01(rng)).count());
  EXPECT_NEAR(sum / draws, 1000.0, 10.0);  // ceiling 2000 ms; the standard error is ~1.8 ms
}

TEST(Backoff, R1_DecorrelatedStaysBetweenBaseAndThreeTimesPreviousCappedAtCap) {
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  duration prev = 200ms;
  for (int i = 0; i < 10'000; ++i) {
    auto const d = decorrelated_jitter(prev, 200ms, 2s, u01(rng));
    ASSERT_GE(d, 200ms);
    ASSERT_LE(d, std::min<duration>(2s, prev * 3));
    prev = d;
  }
  EXPECT_EQ(decorrelated_jitter(10s, 200ms, 2s, 1.0), 2s);
  EXPECT_EQ(decorrelated_jitter(200ms, 200ms, 2s, 0.0), 200ms);
}

TEST(Backoff, R1_DegenerateInputsWaitNothingRatherThanMisbehave) {
  EXPECT_EQ(full_jitter(0, 1s, 30s, 0.5), 0ms);
  EXPECT_EQ(full_jitter(1, 0ms, 30s, 0.5), 0ms);
  EXPECT_EQ(full_jitter(1, 1s, 30s, 7.0), 1s);  // u outside [0,1) is clamped
}

TEST(Backoff, R3_ScheduledJitterDrawsOverEachStepOfTheTable) {
  std::vector<duration> const table{1000ms, 5000ms, 30000ms};
  EXPECT_EQ(scheduled_jitter(table, 1, 0.0), 0ms);
  EXPECT_EQ(scheduled_jitter(table, 1, 1.0), 1000ms);
  EXPECT_EQ(scheduled_jitter(table, 2, 0.0), 1000ms) << "retry 2 waits at least the previous step";
  EXPECT_EQ(scheduled_jitter(table, 2, 1.0), 5000ms);
  EXPECT_EQ(scheduled_jitter(table, 3, 0.5), 17500ms);
  EXPECT_EQ(scheduled_jitter(table, 9, 0.0), 5000ms) << "past the table, the last step's range again";
  EXPECT_EQ(scheduled_jitter(table, 9, 1.0), 30000ms);
  EXPECT_EQ(scheduled_jitter({}, 1, 0.5), 0ms);
}
