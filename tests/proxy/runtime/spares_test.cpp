#include "proxy/runtime/relay_buffers.hpp"
#include "proxy/runtime/spares.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace spares_test {
namespace {

using rebound::runtime::relay_buffers;
using rebound::runtime::spares;

/// Takes `n` (new ones where none is kept) and gives them all back, as `n` requests in flight do.
void burst(spares<int>& s, int n) {
  std::vector<int> out;
  for (int i = 0; i < n; ++i) out.push_back(s.take().value_or(i));
  for (auto v : out) s.give(std::move(v));
}

TEST(Spares, AsManyAreKeptAsWereOutAtOnceUpToTheCap) {
  spares<int> s(4, 100);
  burst(s, 30);
  EXPECT_EQ(s.size(), 30u);
  burst(s, 500);
  EXPECT_EQ(s.size(), 100u) << "a burst's spares are bounded";
}

TEST(Spares, ATrimFreesWhatNoTakeReachedSinceTheTrimBefore) {
  spares<int> s(4, 100);
  burst(s, 30);
  s.trim();
  EXPECT_EQ(s.size(), 30u) << "all 30 were out at once during the burst: none is surplus yet";
  burst(s, 10);  // the load falls: 20 were not taken since the last trim
  s.trim();
  EXPECT_EQ(s.size(), 10u);
  s.trim();  // nothing taken at all
  EXPECT_EQ(s.size(), 4u) << "a quiet worker keeps its floor";
  s.trim();
  EXPECT_EQ(s.size(), 4u);
}

TEST(Spares, TheWarmestIsTakenFirstAndTheColdestFreedFirst) {
  spares<int> s(1, 10);
  s.give(1);
  s.give(2);
  s.give(3);
  s.trim();  // sets the mark: nothing taken yet, so the next trim may free all but the floor
  EXPECT_EQ(s.take(), 3) << "the most recently given back is the warmest";
  s.give(3);
  s.give(4);
  s.trim();
  ASSERT_EQ(s.size(), 2u) << "two of four were never taken since the last trim";
  EXPECT_EQ(s.take(), 4);
  EXPECT_EQ(s.take(), 3) << "the coldest (1 and 2) were the ones freed";
  EXPECT_FALSE(s.take());
}

TEST(RelayBuffers, ABurstOfBuffersIsFreedBySecondTrimAfterItEnds) {
  relay_buffers b;
  {
    std::vector<relay_buffers::lease> out;
    for (int i = 0; i < 12; ++i) out.push_back(b.take(relay_buffers::small_size));
    for (int i = 0; i < 12; ++i) out.push_back(b.take(relay_buffers::large_size));
  }
  EXPECT_EQ(b.spare_count(), 24u) << "a burst's buffers were not kept for the next";
  b.trim();
  EXPECT_EQ(b.spare_count(), 24u) << "all were out at once: none is surplus yet";
  b.trim();
  EXPECT_EQ(b.spare_count(), 4u) << "a quiet worker keeps two of each size";
  auto const lease = b.take(relay_buffers::large_size);
  EXPECT_EQ(lease.size(), relay_buffers::large_size);
}

}  // namespace
}  // namespace spares_test
