#include "proxy/wire/head_fields.hpp"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <thread>
#include <vector>

using namespace rebound::http;

namespace {
constexpr bool kept = head_blocks_reused;  // not under ASan: every block goes straight to delete
}  // namespace

TEST(HeadFields, ABlockGivenBackIsTheNextOneTakenOfItsSizeOnThatThread) {
  if (!kept) GTEST_SKIP() << "blocks are not kept under AddressSanitizer";
  void* a = take_head_block(80);
  give_head_block(a, 80);
  void* b = take_head_block(70);  // the same 96-byte class
  EXPECT_EQ(a, b);
  void* c = take_head_block(200);  // another class: not that block
  EXPECT_NE(c, b);
  give_head_block(b, 70);
  give_head_block(c, 200);
}

TEST(HeadFields, AThreadKeepsAtMostHeadBlocksKeptOfOneSize) {
  if (!kept) GTEST_SKIP() << "blocks are not kept under AddressSanitizer";
  // On a thread of its own, so that what other tests left in this thread's lists does not count.
  std::thread([] {
    std::vector<void*> first;
    for (std::size_t i = 0; i < head_blocks_kept + 50; ++i) first.push_back(take_head_block(100));
    for (void* b : first) give_head_block(b, 100);
    // The lists are last in, first out: the kept blocks are the first head_blocks_kept given
    // (the 50 after them went to delete), and they come back newest first.
    std::vector<void*> again;
    for (std::size_t i = 0; i < head_blocks_kept; ++i) again.push_back(take_head_block(100));
    EXPECT_EQ(again.front(), first[head_blocks_kept - 1]);
    EXPECT_EQ(again.back(), first.front());
    for (void* b : again) give_head_block(b, 100);
  }).join();
}

TEST(HeadFields, FieldsMadeOnOneThreadAreEditedAndFreedOnAnother) {
  head_fields f;
  for (int i = 0; i < 40; ++i) f.insert("X-Field-" + std::to_string(i), std::string(static_cast<std::size_t>(i) * 30, 'v'));
  std::thread([moved = std::move(f)]() mutable {
    moved.erase("X-Field-3");
    moved.set("X-Field-39", "short now");
    EXPECT_EQ(moved.count("X-Field-3"), 0u);
    EXPECT_EQ(moved["X-Field-39"], "short now");
    EXPECT_EQ(moved["X-Field-20"], std::string(600, 'v'));  // above the largest class: operator new
  }).join();
  head_fields g;  // this thread's lists still serve
  g.insert("X-After", "1");
  EXPECT_EQ(g["X-After"], "1");
}
