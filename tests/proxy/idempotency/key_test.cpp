#include "proxy/idempotency/key.hpp"

#include <gtest/gtest.h>

#include <regex>
#include <set>

using namespace rebound::idempotency;
namespace bhttp = boost::beast::http;

TEST(Idempotency, R6_SafeMethodsAreRetriedFreely) {
  for (auto v : {bhttp::verb::get, bhttp::verb::head, bhttp::verb::options, bhttp::verb::put, bhttp::verb::delete_})
    EXPECT_TRUE(retry_safe_method(v));
  for (auto v : {bhttp::verb::post, bhttp::verb::patch, bhttp::verb::connect, bhttp::verb::trace})
    EXPECT_FALSE(retry_safe_method(v));
}

TEST(Idempotency, R6_PostAndPatchNeedAKey) {
  EXPECT_TRUE(needs_key(bhttp::verb::post));
  EXPECT_TRUE(needs_key(bhttp::verb::patch));
  EXPECT_FALSE(needs_key(bhttp::verb::get));
}

TEST(Idempotency, R6_KeyOver64CharactersIsRefused) {
  EXPECT_FALSE(key_problem(std::string(64, 'a')));
  EXPECT_TRUE(key_problem(std::string(65, 'a')));
  EXPECT_TRUE(key_problem(""));
  EXPECT_TRUE(key_problem("bad\x01key"));
}

TEST(Idempotency, R6_GeneratedKeysAreDistinctUuidV4) {
  std::regex const uuid4("^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$");
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) {
    auto k = new_key();
    ASSERT_TRUE(k);
    EXPECT_TRUE(std::regex_match(*k, uuid4)) << *k;
    EXPECT_FALSE(key_problem(*k));
    seen.insert(*k);
  }
  EXPECT_EQ(seen.size(), 1000u);
}
