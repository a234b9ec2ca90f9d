// R-6's payload fingerprint (seed 004): the same request hashes the same however its JSON is
// spelled; another method, target or payload does not.
#include "proxy/inbound/fingerprint.hpp"

#include <gtest/gtest.h>

using namespace rebound::inbound;

TEST(Fingerprint, R6_KeyOrderAndWhitespaceOfAJsonBodyDoNotChangeIt) {
  auto const a = payload_fingerprint("POST", "/refunds", "application/json",
                                     R"({"charge":"ch_1","amount":1000,"meta":{"b":1,"a":[1,2]}})");
  auto const b = payload_fingerprint("POST", "/refunds", "application/json; charset=utf-8",
                                     "{ \"amount\": 1000,\n  \"meta\": {\"a\": [1, 2], \"b\": 1}, \"charge\": \"ch_1\" }");
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.size(), 64u);
}

TEST(Fingerprint, R6_AnotherPayloadMethodOrTargetChangesIt) {
  auto const base = payload_fingerprint("POST", "/refunds", "application/json", R"({"amount":1000})");
  EXPECT_NE(base, payload_fingerprint("POST", "/refunds", "application/json", R"({"amount":1001})"));
  EXPECT_NE(base, payload_fingerprint("PATCH", "/refunds", "application/json", R"({"amount":1000})"));
  EXPECT_NE(base, payload_fingerprint("POST", "/refunds?x=1", "application/json", R"({"amount":1000})"));
  EXPECT_NE(base, payload_fingerprint("POST", "/refunds", "application/json", R"([{"amount":1000}])"));
}

TEST(Fingerprint, ABodyThatIsNotJsonIsHashedAsItsBytes) {
  EXPECT_NE(payload_fingerprint("POST", "/x", "text/plain", "a=1&b=2"),
            payload_fingerprint("POST", "/x", "text/plain", "b=2&a=1"));
  EXPECT_EQ(payload_fingerprint("POST", "/x", "application/json", "{not json"),
            payload_fingerprint("POST", "/x", "application/json", "{not json"));
  EXPECT_NE(payload_fingerprint("POST", "/x", "text/plain", R"({"a":1,"b":2})"),
            payload_fingerprint("POST", "/x", "text/plain", R"({"b":2,"a":1})"))
      << "only a body that says it is JSON is canonicalized";
}

TEST(Fingerprint, Sha256IsTheStandardOne) {
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}
