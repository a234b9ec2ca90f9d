#include "proxy/wire/error_response.hpp"

#include <gtest/gtest.h>

namespace bhttp = boost::beast::http;
using namespace rebound::http;

TEST(ErrorResponse, CarriesTypeHeaderAndSpecJsonBody) {
  auto res = make_error_response({502, error_type::connect_refused, "connect \"x\" failed", "payments", 1}, true);
  EXPECT_EQ(res.result_int(), 502u);
  EXPECT_EQ(res["Rebound-Error"], "connect_refused");
  EXPECT_EQ(res[bhttp::field::content_type], "application/json");
  EXPECT_EQ(
      res.body(),
      "{\"error\":{\"type\":\"connect_refused\",\"message\":\"connect \\\"x\\\" failed\",\"dependency\":\"payments\","
      "\"attempts\":1}}\n");
  EXPECT_EQ(res[bhttp::field::content_length], std::to_string(res.body().size()));
  EXPECT_TRUE(res.keep_alive());
}

TEST(ErrorResponse, CloseIsSaidWhenTheConnectionEnds) {
  auto res = make_error_response({400, error_type::bad_request, "bad", "", 0}, false);
  EXPECT_FALSE(res.keep_alive());
  EXPECT_EQ(res[bhttp::field::connection], "close");
}

TEST(ErrorResponse, EveryTypeHasItsSpecNameAndStatus) {
  EXPECT_EQ(to_string(error_type::retry_after_exceeds_deadline), "retry_after_exceeds_deadline");
  EXPECT_EQ(default_status(error_type::attempt_timeout), 504u);
  EXPECT_EQ(default_status(error_type::connect_timeout), 502u);
  EXPECT_EQ(default_status(error_type::dns_failure), 502u);
  EXPECT_EQ(default_status(error_type::circuit_open), 503u);
  EXPECT_EQ(default_status(error_type::unknown_host), 403u);
}

// Issue 22: a 503 that sheds load tells a calling rebound to back off.
TEST(ErrorResponse, LoadSheddingAnswersSayOverloaded) {
  for (auto t : {error_type::circuit_open, error_type::budget_exhausted, error_type::overloaded}) {
    auto res = make_error_response({503, t, "no", "payments", 0, 3}, true);
    EXPECT_EQ(res["Rebound-Overloaded"], "1") << to_string(t);
    EXPECT_EQ(res[bhttp::field::retry_after], "3");
  }
  for (auto t : {error_type::connect_refused, error_type::deadline_exceeded, error_type::store_unavailable}) {
    auto res = make_error_response({default_status(t), t, "no", "payments", 2}, true);
    EXPECT_EQ(res.count("Rebound-Overloaded"), 0u) << to_string(t);
  }
}

TEST(ErrorResponse, GivingUpAfterRetriesSaysRetriedExhausted) {
  auto res = make_error_response({502, error_type::connect_refused, "no", "payments", 4, 0, true}, true);
  EXPECT_EQ(res["Rebound-Retried"], "exhausted");
  EXPECT_EQ(res["Rebound-Attempts"], "4");
  auto once = make_error_response({502, error_type::connect_refused, "no", "payments", 1}, true);
  EXPECT_EQ(once.count("Rebound-Retried"), 0u);
}
