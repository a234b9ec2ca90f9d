#include "proxy/auth/jwt.hpp"

#include <gtest/gtest.h>

using namespace rebound::auth;

namespace jwt_test {
namespace {

std::string b64url(std::string_view s) {
  auto out = base64_encode(s);
  while (!out.empty() && out.back() == '=') out.pop_back();
  for (auto& c : out) c = c == '+' ? '-' : c == '/' ? '_' : c;
  return out;
}

std::string jwt(std::string_view claims) { return b64url(R"({"alg":"none"})") + "." + b64url(claims) + ".sig"; }

TEST(Jwt, Base64MatchesRfc4648Vectors) {
  EXPECT_EQ(base64_encode(""), "");
  EXPECT_EQ(base64_encode("f"), "Zg==");
  EXPECT_EQ(base64_encode("fo"), "Zm8=");
  EXPECT_EQ(base64_encode("foo"), "Zm9v");
  EXPECT_EQ(base64_encode("foobar"), "Zm9vYmFy");
  EXPECT_EQ(base64url_decode("Zm9vYmE"), "fooba");
  EXPECT_EQ(base64url_decode("_-8"), std::string("\xff\xef", 2));
  EXPECT_FALSE(base64url_decode("a"));
  EXPECT_FALSE(base64url_decode("ab$d"));
}

TEST(Jwt, ExpiryIsTheExpClaim) {
  auto const exp = jwt_expiry(jwt(R"({"sub":"a","exp":1700000000})"));
  ASSERT_TRUE(exp);
  EXPECT_EQ(std::chrono::duration_cast<std::chrono::seconds>(exp->time_since_epoch()).count(), 1700000000);
  EXPECT_TRUE(jwt_expiry(jwt(R"({"exp":1700000000.5})")));
}

TEST(Jwt, NoExpiryWhenNotAJwtOrNoNumericExp) {
  EXPECT_FALSE(jwt_expiry("opaque-token"));
  EXPECT_FALSE(jwt_expiry("a.b"));
  EXPECT_FALSE(jwt_expiry(jwt(R"({"sub":"a"})")));
  EXPECT_FALSE(jwt_expiry(jwt(R"({"exp":"tomorrow"})")));
  EXPECT_FALSE(jwt_expiry(jwt(R"({"exp":-5})")));
  EXPECT_FALSE(jwt_expiry(jwt(R"({"exp":1e300})"))) << "beyond what the clock can hold";
  EXPECT_FALSE(jwt_expiry(jwt("not json")));
  EXPECT_FALSE(jwt_expiry("a.!!!.c"));
}

TEST(Jwt, BearerTokenOfAnAuthorizationValue) {
  EXPECT_EQ(bearer_token("Bearer abc"), "abc");
  EXPECT_EQ(bearer_token("bearer  abc "), "abc");
  EXPECT_EQ(bearer_token("Basic abc"), "");
  EXPECT_EQ(bearer_token("Bearerabc"), "");
  EXPECT_EQ(bearer_token("Bear"), "");
}

}  // namespace

}  // namespace jwt_test
