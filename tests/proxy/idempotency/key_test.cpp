#include "proxy/idempotency/key.hpp"

#include <boost/beast/http/fields.hpp>
#include <gtest/gtest.h>

#include <regex>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <vector>

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

// Each worker thread draws its randomness in blocks (key.cpp): two threads never hand out
// the same key, and neither repeats one across its refills.
TEST(Idempotency, R6_KeysMadeOnTwoThreadsAtOnceAreAllDistinct) {
  std::vector<std::string> a, b;
  auto make = [](std::vector<std::string>& into) {
    for (int i = 0; i < 2000; ++i) into.push_back(new_key().value_or(""));
  };
  std::thread ta(make, std::ref(a)), tb(make, std::ref(b));
  ta.join();
  tb.join();
  std::set<std::string> seen(a.begin(), a.end());
  seen.insert(b.begin(), b.end());
  seen.erase("");
  EXPECT_EQ(seen.size(), 4000u);
}

// R-6's one rule for a valid key, whichever way the request came in: a comma is two keys
// folded into one field, quotes and backslashes would read differently as an SF string.
TEST(Idempotency, R6_OneRuleForAValidKeyEverywhere) {
  EXPECT_FALSE(key_problem("pay-2026-11-26 #1")) << "printable ASCII, inner space included";
  EXPECT_TRUE(key_problem("a,b"));
  EXPECT_TRUE(key_problem("a\"b"));
  EXPECT_TRUE(key_problem("a\\b"));
  EXPECT_EQ(key_in_field("\"abc\""), "abc") << "a Structured Field string is unquoted";
  EXPECT_EQ(key_in_field("abc"), "abc");
}

namespace key_test {
namespace {
sent_key sent(std::string_view v) { return {v, false}; }
}  // namespace

TEST(Idempotency, R6_PlanKeepsAValidKeyAndLetsThePostGoAgain) {
  auto const p = plan_key(sent("\"order-7\""), bhttp::verb::post, false);
  EXPECT_FALSE(p.refusal);
  EXPECT_EQ(p.key, "order-7");
  EXPECT_FALSE(p.made);
  EXPECT_TRUE(p.may_retry);
}

TEST(Idempotency, R6_PlanInjectsAKeyOnlyWhereOneIsNeededAndAllowed) {
  auto const injected = plan_key({}, bhttp::verb::patch, true);
  EXPECT_TRUE(injected.made);
  EXPECT_FALSE(key_problem(injected.key));
  EXPECT_TRUE(injected.may_retry);

  auto const refused = plan_key({}, bhttp::verb::post, false);
  EXPECT_FALSE(refused.made);
  EXPECT_FALSE(refused.may_retry);
  EXPECT_NE(refused.why_not.find("inject is false"), std::string_view::npos);

  auto const get = plan_key({}, bhttp::verb::get, true);
  EXPECT_FALSE(get.made) << "a GET needs no key";
  EXPECT_TRUE(get.may_retry);

  auto const connect = plan_key({}, bhttp::verb::connect, true);
  EXPECT_FALSE(connect.may_retry);
  EXPECT_EQ(connect.why_not, "the method is not idempotent (R-6)");
}

TEST(Idempotency, R6_PlanRefusesAMalformedOrRepeatedKeyBeforeAnythingIsSent) {
  EXPECT_TRUE(plan_key(sent(std::string(65, 'k')), bhttp::verb::post, true).refusal);
  EXPECT_TRUE(plan_key(sent("a,b"), bhttp::verb::get, true).refusal) << "refused whatever the method";
  EXPECT_TRUE(plan_key({std::string_view("k1"), true}, bhttp::verb::post, true).refusal) << "two key fields";
}

TEST(Idempotency, R6_AHeadsKeyFieldIsReadByTheNameThePolicyGivesAndTwoAreSeen) {
  bhttp::fields head;
  EXPECT_FALSE(sent_key_in(head, "Idempotency-Key").value) << "absent";
  head.insert("idempotency-key", "\"k1\"");  // names match case-insensitively
  auto const one = sent_key_in(head, "Idempotency-Key");
  ASSERT_TRUE(one.value);
  EXPECT_EQ(*one.value, "\"k1\"") << "as sent: unquoting is key_in_field's";
  EXPECT_FALSE(one.repeated);
  EXPECT_FALSE(sent_key_in(head, "X-Request-Key").value) << "another policy's field name";
  head.insert("Idempotency-Key", "k2");
  EXPECT_TRUE(sent_key_in(head, "Idempotency-Key").repeated);
}

TEST(Idempotency, R6_AHandedOverCallAlwaysCarriesAKey) {
  auto const p = plan_key({}, bhttp::verb::get, false, key_need::always);
  EXPECT_TRUE(p.made) << "delivery retries after any failure, whatever the method or inject";
  EXPECT_FALSE(p.key.empty());
}

}  // namespace key_test
