#include "proxy/auth/oauth2_client.hpp"

#include <gtest/gtest.h>

using namespace rebound::auth;
using namespace std::chrono_literals;

namespace oauth2_client_test {
namespace {

auto const now = wall_clock::time_point(std::chrono::seconds(1'700'000'000));

TEST(OAuth2Client, ReadsAnAccessTokenAnswer) {
  auto const a = read_token_answer(200, R"({"access_token":"t1","token_type":"bearer","expires_in":60})", now);
  ASSERT_TRUE(a.access_token) << a.error;
  EXPECT_EQ(*a.access_token, "t1");
  EXPECT_EQ(a.expires_in, 60s);
}

TEST(OAuth2Client, WithoutExpiresInTheFallbackLifetimeIsUsed) {
  auto const a = read_token_answer(200, R"({"access_token":"t1"})", now, 300s);
  ASSERT_TRUE(a.access_token);
  EXPECT_EQ(a.expires_in, 300s);
}

TEST(OAuth2Client, RefusalsSayWhyWithoutEchoingTheBody) {
  auto const denied =
      read_token_answer(401, R"({"error":"invalid_client","error_description":"secret s3cret wrong"})", now);
  EXPECT_FALSE(denied.access_token);
  EXPECT_EQ(denied.error, "the token endpoint answered 401 (invalid_client)");
  auto const odd = read_token_answer(500, R"({"error":"has spaces and s3cret"})", now);
  EXPECT_EQ(odd.error, "the token endpoint answered 500");
  EXPECT_NE(read_token_answer(200, "not json", now).error.find("not a JSON object"), std::string::npos);
  EXPECT_NE(read_token_answer(200, R"({"token_type":"bearer"})", now).error.find("no access_token"), std::string::npos);
  EXPECT_NE(read_token_answer(200, R"({"access_token":"t","token_type":"mac"})", now).error.find("not a Bearer"),
            std::string::npos);
  EXPECT_NE(read_token_answer(200, R"({"access_token":"a\r\nX: y"})", now).error.find("cannot go in a header"),
            std::string::npos);
}

TEST(OAuth2Client, RefreshIsDueAtTheSkewButNotBeforeHalfTheLifetime) {
  auto const t0 = steady_clock::time_point(std::chrono::hours(1));
  EXPECT_EQ(refresh_at(t0 + 3600s, 3600s, 30s), t0 + 3570s);
  EXPECT_EQ(refresh_at(t0 + 10s, 10s, 30s), t0 + 5s) << "a token shorter than the skew is used for half its life";
  EXPECT_EQ(refresh_at(t0 + 60s, 60s, 0s), t0 + 60s);
}

}  // namespace

}  // namespace oauth2_client_test
