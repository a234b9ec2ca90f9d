#include "proxy/retry/classify.hpp"

#include <gtest/gtest.h>

using namespace rebound::retry;
using rebound::retry::error_type;

namespace classify_test {
namespace {
attempt_outcome status(unsigned s) { return {s, std::nullopt}; }
attempt_outcome error(error_type e) { return {std::nullopt, e}; }
}  // namespace

TEST(Classify, R4_RetryableStatusesAreRetried) {
  auto const all = retry_on::r4_default();
  for (unsigned s : {408u, 429u, 500u, 502u, 503u, 504u}) EXPECT_EQ(classify(status(s), all), verdict::retryable) << s;
}

TEST(Classify, R4_NonRetryableStatusesAreFinal) {
  auto const all = retry_on::r4_default();
  for (unsigned s : {400u, 401u, 403u, 404u, 409u, 422u, 501u, 505u})
    EXPECT_EQ(classify(status(s), all), verdict::final) << s;
}

TEST(Classify, R4_SuccessIsNotRetried) {
  for (unsigned s : {200u, 201u, 204u, 301u, 304u})
    EXPECT_EQ(classify(status(s), retry_on::r4_default()), verdict::success);
}

TEST(Classify, R4_NetworkFailuresAreRetried) {
  auto const all = retry_on::r4_default();
  for (auto e : {error_type::connect_refused, error_type::connect_reset, error_type::connect_timeout,
                 error_type::attempt_timeout, error_type::dns_failure, error_type::tls_handshake_timeout})
    EXPECT_EQ(classify(error(e), all), verdict::retryable) << to_string(e);
}

TEST(Classify, R9_TlsCertificateErrorIsNeverRetried) {
  EXPECT_EQ(classify(error(error_type::tls_certificate), retry_on::r4_default()), verdict::final);
}

TEST(Classify, R4_ProtocolAndAuthErrorsAreFinal) {
  EXPECT_EQ(classify(error(error_type::upstream_protocol_error), retry_on::r4_default()), verdict::final);
  EXPECT_EQ(classify(error(error_type::auth_refresh_failed), retry_on::r4_default()), verdict::final);
}

TEST(Classify, R4_RetryOnNarrowsTheSet) {
  auto only = retry_on::none();
  only.add(retry_on::cls::s503);
  only.add(retry_on::cls::connect_refused);
  EXPECT_EQ(classify(status(503), only), verdict::retryable);
  EXPECT_EQ(classify(error(error_type::connect_refused), only), verdict::retryable);
  EXPECT_EQ(classify(status(500), only), verdict::final);
  EXPECT_EQ(classify(error(error_type::connect_reset), only), verdict::final);
}

TEST(Classify, R4_RetryOnCannotWidenToAFinalClass) {
  for (auto bad : {"400", "401", "403", "404", "409", "422", "tls_certificate"}) {
    auto r = retry_on::parse(bad);
    EXPECT_FALSE(r.value) << bad;
    EXPECT_NE(r.error.find("never widen"), std::string::npos) << r.error;
  }
  EXPECT_FALSE(retry_on::parse("5xx").value);
  EXPECT_EQ(retry_on::parse("503").value, retry_on::cls::s503);
  EXPECT_EQ(retry_on::parse("timeout").value, retry_on::cls::timeout);
}

namespace {
attempt_outcome grpc(unsigned code) { return {200u, std::nullopt, code}; }
}  // namespace

// R-4's gRPC column: UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED and ABORTED are retried.
TEST(Classify, R4_RetryableGrpcStatusesAreRetried) {
  for (unsigned code : {14u, 4u, 8u, 10u})
    EXPECT_EQ(classify(grpc(code), retry_on::r4_default()), verdict::retryable) << code;
}

// INVALID_ARGUMENT, NOT_FOUND, PERMISSION_DENIED, UNAUTHENTICATED, UNIMPLEMENTED: never, and
// a status outside the table (INTERNAL, UNKNOWN) is the upstream's answer too.
TEST(Classify, R4_NonRetryableGrpcStatusesAreFinal) {
  for (unsigned code : {3u, 5u, 7u, 16u, 12u, 13u, 2u})
    EXPECT_EQ(classify(grpc(code), retry_on::r4_default()), verdict::final) << code;
}

// A gRPC failure arrives with HTTP 200: grpc-status decides, and OK is a success.
TEST(Classify, R4_GrpcStatusDecidesOverTheHttpStatus) {
  EXPECT_EQ(classify(grpc(0), retry_on::r4_default()), verdict::success);
  EXPECT_EQ(classify(grpc(14), retry_on::none()), verdict::final);
  EXPECT_EQ(outcome_name(grpc(14)), "grpc_14");
}

TEST(Classify, R4_RetryOnNamesTheGrpcClasses) {
  EXPECT_EQ(retry_on::parse("grpc_unavailable").value, retry_on::cls::grpc_unavailable);
  EXPECT_EQ(retry_on::parse("grpc_aborted").value, retry_on::cls::grpc_aborted);
  auto r = retry_on::parse("grpc_invalid_argument");
  EXPECT_FALSE(r.value);
  EXPECT_NE(r.error.find("never widen"), std::string::npos) << r.error;
  auto only = retry_on::none();
  only.add(retry_on::cls::grpc_unavailable);
  EXPECT_EQ(classify(grpc(14), only), verdict::retryable);
  EXPECT_EQ(classify(grpc(8), only), verdict::final);
}

}  // namespace classify_test
