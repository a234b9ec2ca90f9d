#include "config/typed_values.hpp"

#include <gtest/gtest.h>

using namespace rebound::config;
using namespace std::chrono_literals;

TEST(Duration, AcceptsEveryUnit) {
  EXPECT_EQ(*parse_duration("250ms").value, 250ms);
  EXPECT_EQ(*parse_duration("1s").value, 1000ms);
  EXPECT_EQ(*parse_duration("2m").value, 120'000ms);
  EXPECT_EQ(*parse_duration("24h").value, 86'400'000ms);
  EXPECT_EQ(*parse_duration("7d").value, 7 * 86'400'000ms);
  EXPECT_EQ(*parse_duration("0s").value, 0ms);
}

TEST(Duration, RefusesWhatIsNotADurationAndSaysWhatIsAccepted) {
  for (auto bad : {"", "10", "1.5s", "-1s", "s", "1 s", "1sec", "1w", "10S"}) {
    auto r = parse_duration(bad);
    EXPECT_FALSE(r.value) << bad;
    EXPECT_NE(r.error.find("expected"), std::string::npos) << r.error;
  }
}

TEST(Duration, RefusesOverflow) {
  EXPECT_FALSE(parse_duration("99999999999999999999h").value);
  EXPECT_FALSE(parse_duration("9000000h").value);
}

TEST(Size, AcceptsBinaryUnits) {
  EXPECT_EQ(*parse_size("512KiB").value, 512u * 1024);
  EXPECT_EQ(*parse_size("1MiB").value, 1u << 20);
  EXPECT_EQ(*parse_size("2GiB").value, 2ull << 30);
  EXPECT_EQ(*parse_size("100").value, 100u);
  EXPECT_EQ(*parse_size("100B").value, 100u);
}

TEST(Size, RefusesUnknownUnitsAndOverflow) {
  EXPECT_FALSE(parse_size("1MB").value);
  EXPECT_FALSE(parse_size("1.5MiB").value);
  EXPECT_FALSE(parse_size("KiB").value);
  EXPECT_FALSE(parse_size("17179869184GiB").value);
}

TEST(Endpoint, AcceptsIpv4AndBracketedIpv6) {
  auto a = parse_endpoint("127.0.0.1:3128");
  ASSERT_TRUE(a.value);
  EXPECT_EQ(a.value->host, "127.0.0.1");
  EXPECT_EQ(a.value->port, 3128);
  auto b = parse_endpoint("[::1]:0");
  ASSERT_TRUE(b.value);
  EXPECT_EQ(b.value->host, "::1");
  EXPECT_EQ(b.value->port, 0);
}

TEST(Endpoint, RefusesNamesBadPortsAndUnbracketedIpv6) {
  for (auto bad : {"localhost:3128", "127.0.0.1", "127.0.0.1:65536", "127.0.0.1:-1", "::1:80", ":80", "127.0.0.1:8o"})
    EXPECT_FALSE(parse_endpoint(bad).value) << bad;
}

TEST(EditDistance, CountsEdits) {
  EXPECT_EQ(edit_distance("listen", "listen"), 0u);
  EXPECT_EQ(edit_distance("lisen", "listen"), 1u);
  EXPECT_EQ(edit_distance("workrs", "workers"), 1u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
}

TEST(TypedValues, OriginIsAnHttpUrlWithHostAndPortOnly) {
  auto o = parse_origin("http://10.0.0.5:8080");
  ASSERT_TRUE(o.value) << o.error;
  EXPECT_EQ(o.value->host, "10.0.0.5");
  EXPECT_EQ(o.value->port, 8080);
  o = parse_origin("http://payments.svc.cluster.local/");
  ASSERT_TRUE(o.value) << o.error;
  EXPECT_EQ(o.value->port, 80);
  o = parse_origin("http://[::1]:9000");
  ASSERT_TRUE(o.value) << o.error;
  EXPECT_EQ(o.value->host, "::1");
  EXPECT_EQ(format_origin(*o.value), "http://[::1]:9000");
}

TEST(TypedValues, HttpsOriginDefaultsToPort443) {
  auto const o = parse_origin("https://pay.example.com");
  ASSERT_TRUE(o.value) << o.error;
  EXPECT_EQ(o.value->scheme, "https");
  EXPECT_EQ(o.value->port, 443);
  EXPECT_EQ(format_origin(*o.value), "https://pay.example.com:443");
  auto const p = parse_origin("https://10.0.0.5:8443/");
  ASSERT_TRUE(p.value) << p.error;
  EXPECT_EQ(p.value->port, 8443);
}

TEST(TypedValues, ServiceUrlKeepsPathAndQuery) {
  auto const u = parse_service_url("https://auth.example.com/oauth/token?realm=a");
  ASSERT_TRUE(u.value) << u.error;
  EXPECT_EQ(u.value->origin.host, "auth.example.com");
  EXPECT_EQ(u.value->origin.port, 443);
  EXPECT_EQ(u.value->target, "/oauth/token?realm=a");
  EXPECT_EQ(format_service_url(*u.value), "https://auth.example.com/oauth/token?realm=a");
  auto const bare = parse_service_url("http://127.0.0.1:8080");
  ASSERT_TRUE(bare.value) << bare.error;
  EXPECT_EQ(bare.value->target, "/");
  EXPECT_EQ(format_service_url(*bare.value), "http://127.0.0.1:8080/");
  EXPECT_NE(parse_service_url("https://id:secret@auth/token").error.find("credentials"), std::string::npos);
  EXPECT_NE(parse_service_url("https://auth/token#x").error.find("fragment"), std::string::npos);
  EXPECT_NE(parse_service_url("ftp://auth/token").error.find("not an http:// or https:// URL"), std::string::npos);
}

TEST(TypedValues, OriginRefusalsSayWhy) {
  EXPECT_NE(parse_origin("http://user:pw@host").error.find("credentials"), std::string::npos);
  EXPECT_NE(parse_origin("http://host/v1").error.find("path"), std::string::npos);
  EXPECT_NE(parse_origin("ftp://host").error.find("not an http:// or https:// URL"), std::string::npos);
  EXPECT_NE(parse_origin("http://host:0").error.find("invalid port"), std::string::npos);
  EXPECT_NE(parse_origin("http://host:99999").error.find("invalid port"), std::string::npos);
  EXPECT_NE(parse_origin("http://ho st").error.find("not a valid URL"), std::string::npos);
  EXPECT_NE(parse_origin("http://ho%41st").error.find("invalid host"), std::string::npos);
  EXPECT_NE(parse_origin("http://[v1.x]").error.find("invalid host"), std::string::npos);
  EXPECT_NE(parse_origin("http://host:").error.find("invalid port"), std::string::npos);
  EXPECT_FALSE(parse_origin("http://").value);
}
