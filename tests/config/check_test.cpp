// The enforcement table over resolved policies (SPEC 2.1), without YAML: which finding,
// at which key, under which rule and level.
#include "config/check.hpp"

#include <gtest/gtest.h>

using namespace rebound::config;
using namespace std::chrono_literals;

namespace check_test {
namespace {

struct row {
  const char* name;
  void (*change)(policy&);
  std::string_view key;
  const char* rule;
  bool warning;
};

}  // namespace

TEST(CheckPolicy, TheBuiltInPolicyHasNoFinding) { EXPECT_TRUE(check_policy(policy{}).empty()); }

TEST(CheckPolicy, EachRuleFindsItsKeyAtItsLevel) {
  row const rows[] = {
      {"R2_SyncAboveFive", [](policy& p) { p.max_retries = 6; }, "max_retries", "R-2", false},
      {"R2_ApprovedAboveTheRangeWarns",
       [](policy& p) {
         p.max_retries = 7;
         p.approval = "IAB-1";
       },
       "max_retries", "R-2", true},
      {"R2_WebhookBelowThree",
       [](policy& p) {
         p.context = context_kind::webhook;
         p.max_retries = 2;
         p.total_timeout = 1h;
       },
       "max_retries", "R-2", false},
      {"R3_SyncAbove30s", [](policy& p) { p.total_timeout = 31s; }, "total_timeout", "R-3", false},
      {"R3_AsyncAbove24h",
       [](policy& p) {
         p.context = context_kind::async;
         p.max_retries = 5;
         p.total_timeout = 25h;
       },
       "total_timeout", "R-3", false},
      {"R6_NoInjectWarns", [](policy& p) { p.idempotency.inject = false; }, "idempotency.inject", "R-6", true},
      {"R7_BudgetWindowZero", [](policy& p) { p.budget.window = 0s; }, "budget.window", "R-7", false},
      {"R1_BaseAboveCap",
       [](policy& p) {
         p.backoff.base = 2s;
         p.backoff.cap = 1s;
       },
       "backoff", "R-1", false},
      {"R8_AnAsyncRouteThatCannotDeadLetter",
       [](policy& p) {
         p.context = context_kind::async;
         p.max_retries = 5;
         p.total_timeout = 1h;
         p.dead_letter = false;
       },
       "dead_letter", "R-8", false},
      {"ZeroAttemptTimeout", [](policy& p) { p.attempt_timeout = 0s; }, "attempt_timeout", "", false},
  };
  for (auto const& r : rows) {
    policy p;
    r.change(p);
    auto const f = check_policy(p);
    ASSERT_EQ(f.size(), 1u) << r.name;
    EXPECT_EQ(f[0].key, r.key) << r.name;
    EXPECT_EQ(f[0].rule, r.rule) << r.name;
    EXPECT_EQ(f[0].warning, r.warning) << r.name;
  }
}

TEST(CheckPolicy, R8_ASyncRouteMayTurnDeadLettersOffSinceItHandsNothingOver) {
  policy p;
  p.dead_letter = false;
  EXPECT_TRUE(check_policy(p).empty());
}

}  // namespace check_test
