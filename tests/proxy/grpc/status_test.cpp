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
  // Issue 51: the limit sheds load; gRPC says so with RESOURCE_EXHAUSTED, which clients do not retry by default.
  EXPECT_EQ(code_for(e::concurrency_limited), code::resource_exhausted);
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

TEST(GrpcStatus, AnAnswerIsCountedByItsGrpcStatusMappedToHttp) {
  using rebound::grpc::counted_status;
  rebound::h2::fields const ok_head{{":status", "200"}, {"content-type", "application/grpc"}};
  EXPECT_EQ(counted_status(ok_head, {{"grpc-status", "0"}}), 200u);
  EXPECT_EQ(counted_status(ok_head, {{"grpc-status", "14"}}), 503u);
  EXPECT_EQ(counted_status(ok_head, {{"grpc-status", "4"}}), 504u);
  EXPECT_EQ(counted_status(ok_head, {{"grpc-status", "8"}}), 429u);
  EXPECT_EQ(counted_status(ok_head, {{"grpc-status", "1"}}), 499u);
  EXPECT_EQ(counted_status(ok_head, {{"grpc-status", "16"}}), 401u);
  EXPECT_EQ(counted_status(ok_head, {{"grpc-status", "17"}}), 500u) << "a code gRPC does not define";
  // Trailers-only: the status is in the head.
  EXPECT_EQ(counted_status({{":status", "200"}, {"grpc-status", "5"}}, {}), 404u);
  EXPECT_EQ(counted_status(ok_head, {}), 502u) << "no grpc-status: the upstream broke the protocol";
  EXPECT_EQ(counted_status(ok_head, {{"grpc-status", "x1"}}), 502u);
  EXPECT_EQ(counted_status({{":status", "503"}}, {}), 503u) << "an HTTP error counts as itself";
  EXPECT_EQ(counted_status({{":status", "2000"}}, {}), 502u);
}
