#include "proxy/http/error_response.hpp"

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
