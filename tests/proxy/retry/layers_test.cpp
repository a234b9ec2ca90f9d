// What one rebound reads in another's answer (issue 22: one layer retries), and when its
// own answer says it gave up.
#include "proxy/retry/layers.hpp"
#include "proxy/retry/step.hpp"

#include <gtest/gtest.h>

using namespace rebound::retry;

TEST(Layers, ExhaustedBelowIsRead) {
  EXPECT_TRUE(read_layer_signal({"exhausted", {}, {}, {}}).gave_up);
  EXPECT_TRUE(read_layer_signal({" Exhausted ", {}, {}, {}}).gave_up);
  EXPECT_FALSE(read_layer_signal({"exhausted", {}, {}, {}}).overloaded);
}

// A rebound that predates Rebound-Retried still says it: its own error after retries.
TEST(Layers, OwnErrorAfterSeveralAttemptsBelowIsRead) {
  EXPECT_TRUE(read_layer_signal({{}, "4", "connect_refused", {}}).gave_up);
  EXPECT_TRUE(read_layer_signal({{}, "02", "connect_refused", {}}).gave_up);
  EXPECT_TRUE(read_layer_signal({{}, "99999999999999999999999", "attempt_timeout", {}}).gave_up);
}

// One attempt below, or no error of rebound's own, is not a layer that retried.
TEST(Layers, SingleAttemptOrUpstreamAnswerBelowIsNotGivingUp) {
  EXPECT_FALSE(read_layer_signal({{}, "1", "connect_refused", {}}).gave_up);
  EXPECT_FALSE(read_layer_signal({{}, "0", "circuit_open", {}}).gave_up);
  EXPECT_FALSE(read_layer_signal({{}, "4", {}, {}}).gave_up);
  EXPECT_FALSE(read_layer_signal({{}, {}, {}, {}}).gave_up);
}

// A stranger's header must not switch retries off by accident.
TEST(Layers, UnreadableValuesSayNothing) {
  for (auto v : {"", "yes", "exhausted, exhausted", "exhaustedx", "1"})
    EXPECT_FALSE(read_layer_signal({v, {}, {}, {}}).gave_up) << v;
  for (auto a : {"", "-4", "4x", "4.0", " "}) EXPECT_FALSE(read_layer_signal({{}, a, "connect_refused", {}}).gave_up) << a;
  EXPECT_FALSE(read_layer_signal({{}, "4", "", {}}).gave_up);
  for (auto o : {"", "0", "true", "yes", "11"}) EXPECT_FALSE(read_layer_signal({{}, {}, {}, o}).overloaded) << o;
}

TEST(Layers, OverloadedBelowIsRead) {
  EXPECT_TRUE(read_layer_signal({{}, "0", "circuit_open", "1"}).overloaded);
  EXPECT_TRUE(read_layer_signal({{}, {}, {}, " 1"}).overloaded);
}

// Only a retryable failure left after at least one retry is "gave up".
TEST(Layers, GaveUpOnlyAfterRetryingIntoTheLimit) {
  EXPECT_TRUE(gave_up_after_retrying(stop_reason::exhausted, 4));
  EXPECT_TRUE(gave_up_after_retrying(stop_reason::deadline, 2));
  EXPECT_TRUE(gave_up_after_retrying(stop_reason::retry_after_beyond_deadline, 2));
  EXPECT_TRUE(gave_up_after_retrying(stop_reason::layered, 1));  // passed on from below
  // max_retries: 0, or the deadline before any retry: this layer did not retry.
  EXPECT_FALSE(gave_up_after_retrying(stop_reason::exhausted, 1));
  EXPECT_FALSE(gave_up_after_retrying(stop_reason::deadline, 1));
  for (auto r : {stop_reason::final, stop_reason::not_repeatable, stop_reason::credential_expired,
                 stop_reason::pushback_refused, stop_reason::overloaded})
    EXPECT_FALSE(gave_up_after_retrying(r, 3)) << to_string(r);
}

TEST(Layers, OnlyLoadSheddingAnswersSayOverloaded) {
  EXPECT_TRUE(answers_overloaded(error_type::circuit_open));
  EXPECT_TRUE(answers_overloaded(error_type::budget_exhausted));
  EXPECT_TRUE(answers_overloaded(error_type::overloaded));
  for (auto t : {error_type::connect_refused, error_type::deadline_exceeded, error_type::attempt_timeout,
                 error_type::store_unavailable, error_type::bad_request})
    EXPECT_FALSE(answers_overloaded(t)) << to_string(t);
}

TEST(Layers, R5_OnePassReadsRetryAfterAndTheLayerSignalsInAnyCaseTheFirstOfEach) {
  std::vector<std::pair<std::string, std::string>> const head{
      {"content-type", "text/plain"},   {"RETRY-AFTER", "7"},        {"Retry-After", "9"},
      {"rebound-retried", "exhausted"}, {"Rebound-Overloaded", "1"}, {"Rebound-Attemptz", "3"},
      {"X-Rebound-Error", "upstream"}};
  auto const each = [&head](auto&& visit) {
    for (auto const& [name, value] : head) visit(name, value);
  };
  attempt_summary s;
  read_answer_head(each, s);
  ASSERT_TRUE(s.retry_after);
  EXPECT_EQ(*s.retry_after, "7") << "the first Retry-After, whatever its case";
  EXPECT_TRUE(s.below.gave_up);
  EXPECT_TRUE(s.below.overloaded);

  attempt_summary durable;
  read_answer_head(each, durable, false);
  EXPECT_EQ(durable.retry_after, std::optional<std::string_view>("7"));
  EXPECT_FALSE(durable.below.gave_up) << "without the layers, as a delivery reads an answer";
  EXPECT_FALSE(durable.below.overloaded);
}
