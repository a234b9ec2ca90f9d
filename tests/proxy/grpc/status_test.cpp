#include "proxy/grpc/status.hpp"

#include <gtest/gtest.h>

using namespace rebound;
using namespace rebound::grpc;

// What a gRPC client can act on: UNAVAILABLE for "later", DEADLINE_EXCEEDED for time.
TEST(GrpcStatus, ReboundFailuresMapToStatusesClientsActOn) {
  using e = retry::error_type;
  EXPECT_EQ(code_for(e::connect_refused), code::unavailable);
  EXPECT_EQ(code_for(e::circuit_open), code::unavailable);
  EXPECT_EQ(code_for(e::budget_exhausted), code::unavailable);
  EXPECT_EQ(code_for(e::deadline_exceeded), code::deadline_exceeded);
  EXPECT_EQ(code_for(e::attempt_timeout), code::deadline_exceeded);
  EXPECT_EQ(code_for(e::auth_refresh_failed), code::unauthenticated);
  EXPECT_EQ(code_for(e::upstream_protocol_error), code::internal);
  EXPECT_EQ(code_for(e::bad_request), code::invalid_argument);
}

TEST(GrpcStatus, MessageIsPercentEncoded) {
  EXPECT_EQ(encode_message("no route"), "no route");
  EXPECT_EQ(encode_message("50%\n"), "50%25%0A");
  EXPECT_EQ(encode_message("\xc3\xa9"), "%C3%A9");
}

TEST(GrpcStatus, TrailersOnlyAnswerCarriesStatusAndErrorType) {
  auto m = trailers_only(code::unavailable, "down", "circuit_open");
  ASSERT_NE(m.find(":status"), nullptr);
  EXPECT_EQ(*m.find(":status"), "200");
  EXPECT_EQ(*m.find("content-type"), "application/grpc");
  EXPECT_EQ(*m.find("grpc-status"), "14");
  EXPECT_EQ(*m.find("grpc-message"), "down");
  EXPECT_EQ(*m.find("rebound-error"), "circuit_open");
  EXPECT_TRUE(m.body.empty());
  EXPECT_TRUE(m.trailers.empty());
}
