#include "proxy/plan/request_target.hpp"

#include <gtest/gtest.h>

using namespace rebound::http;

TEST(RequestTarget, AbsoluteFormGivesOriginFormWithQueryIntact) {
  auto r = plan::parse_request_target("GET", "http://Example.COM:8080/a/b?x=1&y=%20", "ignored", 1, 11);
  ASSERT_TRUE(r.value) << r.error;
  EXPECT_EQ(r.value->host, "example.com");
  EXPECT_EQ(r.value->port, 8080);
  EXPECT_EQ(r.value->authority, "example.com:8080");
  EXPECT_EQ(r.value->origin_form, "/a/b?x=1&y=%20");
}

TEST(RequestTarget, AbsoluteFormWithoutPathSendsSlashAndDefaultPortIsOmitted) {
  auto r = plan::parse_request_target("GET", "http://example.com", "", 0, 11);
  ASSERT_TRUE(r.value);
  EXPECT_EQ(r.value->origin_form, "/");
  EXPECT_EQ(r.value->port, 80);
  EXPECT_EQ(r.value->authority, "example.com");
}

TEST(RequestTarget, AbsoluteFormOptionsWithoutPathIsAsterisk) {
  auto r = plan::parse_request_target("OPTIONS", "http://example.com", "", 0, 11);
  ASSERT_TRUE(r.value);
  EXPECT_EQ(r.value->origin_form, "*");
}

TEST(RequestTarget, Ipv6LiteralKeepsBracketsForHostButNotForConnect) {
  auto r = plan::parse_request_target("GET", "http://[::1]:9000/x", "", 0, 11);
  ASSERT_TRUE(r.value) << r.error;
  EXPECT_EQ(r.value->host, "[::1]");
  EXPECT_EQ(r.value->connect_host, "::1");
  EXPECT_EQ(r.value->authority, "[::1]:9000");
}

TEST(RequestTarget, OriginFormTakesTheHostHeader) {
  auto r = plan::parse_request_target("GET", "/p?q", "backend.test:81", 1, 11);
  ASSERT_TRUE(r.value) << r.error;
  EXPECT_EQ(r.value->host, "backend.test");
  EXPECT_EQ(r.value->port, 81);
  EXPECT_EQ(r.value->origin_form, "/p?q");
}

TEST(RequestTarget, OriginFormWithoutOrWithSeveralHostsIsRefused) {
  EXPECT_FALSE(plan::parse_request_target("GET", "/p", "", 0, 11).value);
  EXPECT_FALSE(plan::parse_request_target("GET", "/p", "a", 2, 11).value);
  EXPECT_FALSE(plan::parse_request_target("GET", "http://a/p", "a", 2, 11).value);
}

TEST(RequestTarget, PortsOutsideTheRangeAreRefusedNotWrapped) {
  EXPECT_FALSE(plan::parse_request_target("GET", "http://a:99999/", "", 0, 11).value);
  EXPECT_FALSE(plan::parse_request_target("GET", "http://a:0/", "", 0, 11).value);
  EXPECT_FALSE(plan::parse_request_target("GET", "/", "a:65536", 1, 11).value);
}

TEST(RequestTarget, GarbageAndUserinfoAndOtherSchemesAreRefused) {
  for (auto bad : {"", "example.com/x", "ftp://a/", "http://user:pw@a/", "http:///x", "http://a b/", "*",
                   "http://svc:8x/", "http://svc:80x"})
    EXPECT_FALSE(plan::parse_request_target("GET", bad, "h", 1, 11).value) << bad;
}

TEST(RequestTarget, ConnectNeedsHostAndPort) {
  auto r = plan::parse_connect_target("example.com:443");
  ASSERT_TRUE(r.value);
  EXPECT_EQ(r.value->host, "example.com");
  EXPECT_EQ(r.value->port, 443);
  auto v6 = plan::parse_connect_target("[2001:db8::1]:8443");
  ASSERT_TRUE(v6.value);
  EXPECT_EQ(v6.value->connect_host, "2001:db8::1");
  EXPECT_FALSE(plan::parse_connect_target("example.com").value);
  EXPECT_FALSE(plan::parse_connect_target("example.com:").value);
  EXPECT_FALSE(plan::parse_connect_target("example.com:70000").value);
  EXPECT_FALSE(plan::parse_connect_target("/path").value);
}

TEST(RequestTarget, HostsThatEndInANumberButAreNoDottedQuadAreRefused) {
  for (auto host : {"2130706433", "127.1", "0x7f.0.0.1", "0x7f000001", "foo.0x10", "a.b.99"}) {
    auto r = plan::parse_request_target("GET", std::string("http://") + host + "/", "", 0, 11);
    EXPECT_FALSE(r.value) << host;
  }
  for (auto host : {"127.0.0.1", "api.example.com", "v2.api", "1password.com", "0xdead.example"}) {
    auto r = plan::parse_request_target("GET", std::string("http://") + host + "/", "", 0, 11);
    EXPECT_TRUE(r.value) << host << ": " << r.error;
  }
}

// Found by fuzz/fuzz_request_target: the origin form was copied into the upstream's request
// line verbatim, so a space or control character there would split or end that line.
TEST(RequestTarget, OriginFormWithASpaceOrControlCharacterIsRefused) {
  for (std::string_view bad :
       std::initializer_list<std::string_view>{"/p ath", std::string_view("/p\0a", 4), "/a\r\nX: 1", "/a\t", "/\x7f"})
    EXPECT_FALSE(plan::parse_request_target("GET", bad, "svc.local", 1, 11).value) << bad;
  EXPECT_TRUE(plan::parse_request_target("GET", "/caf\xc3\xa9?q=\xff", "svc.local", 1, 11).value);
}

// The common Host value skips Boost.URL (fill_plain_host): for every value, plain or not,
// the origin form's result must be what the full parse of the same authority gives.
TEST(RequestTarget, AHostHeaderMeansWhatTheSameAuthorityMeansInAnAbsoluteTarget) {
  for (std::string host :
       {"svc.local", "SVC.Local:8080", "svc:80", "svc:", "a-b.c-d:65535", "svc:0", "svc:65536", "svc:8x", "127.0.0.1",
        "127.0.0.1:81", "127.1", "a.b.99", "0x7f000001", "[::1]:82", "under_score.local", "a..b", "-x", "x%41",
        "us@er", ":80", "a b"}) {
    auto const origin = plan::parse_request_target("GET", "/", host, 1, 11);
    auto const absolute = plan::parse_request_target("GET", "http://" + host + "/", "", 0, 11);
    ASSERT_EQ(origin.value.has_value(), absolute.value.has_value()) << host << ": " << origin.error << absolute.error;
    if (!origin.value) continue;
    EXPECT_EQ(origin.value->host, absolute.value->host) << host;
    EXPECT_EQ(origin.value->connect_host, absolute.value->connect_host) << host;
    EXPECT_EQ(origin.value->port, absolute.value->port) << host;
    EXPECT_EQ(origin.value->authority, absolute.value->authority) << host;
  }
}

TEST(RequestTarget, PoolKeyNamesSchemeHostAndPortOfTheTarget) {
  rebound::plan::request_target t;
  t.scheme = "http";
  t.connect_host = "2001:db8::1";
  t.port = 8080;
  EXPECT_EQ(rebound::plan::pool_key(t, nullptr), "http://2001:db8::1:8080");
  t.connect_host = "a-rather-long-internal-name.payments.svc.cluster.local";
  t.port = 80;
  EXPECT_EQ(rebound::plan::pool_key(t, nullptr), "http://a-rather-long-internal-name.payments.svc.cluster.local:80");
}
