#include "proxy/wire/hop_by_hop.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace bhttp = boost::beast::http;
using namespace rebound::http;

TEST(HopByHop, RemovesTheFixedListAndWhatConnectionNames) {
  rebound::http::head_fields f;
  f.insert(bhttp::field::connection, "keep-alive, X-Secret-Hop");
  f.insert(bhttp::field::connection, "Other");
  f.insert("X-Secret-Hop", "1");
  f.insert("Other", "1");
  for (auto name : {"Proxy-Connection", "Keep-Alive", "TE", "Trailer", "Transfer-Encoding", "Upgrade",
                    "Proxy-Authorization", "Proxy-Authenticate"})
    f.insert(name, "x");
  f.insert("X-End-To-End", "kept");
  f.insert(bhttp::field::authorization, "Bearer kept");
  strip_hop_by_hop(f);
  std::vector<std::string> left;
  for (auto const& h : f) left.emplace_back(h.name_string());
  EXPECT_EQ(left, (std::vector<std::string>{"X-End-To-End", "Authorization"}));
}

TEST(HopByHop, EveryFieldConnectionNamesGoesHoweverManyItNamesAndInAnyCase) {
  rebound::http::head_fields f;
  std::string list = "close";
  for (int i = 0; i < 12; ++i) list += ", x-hop-" + std::to_string(i);
  f.insert(bhttp::field::connection, list);
  for (int i = 11; i >= 0; --i) f.insert("X-HOP-" + std::to_string(i), "gone");
  f.insert("x-hop-3", "gone too");
  f.insert("Close", "named by the close option");
  f.insert("X-Hop-12", "not named");
  strip_hop_by_hop(f);
  std::vector<std::string> left;
  for (auto const& h : f) left.emplace_back(h.name_string());
  EXPECT_EQ(left, (std::vector<std::string>{"X-Hop-12"}));
}

TEST(HopByHop, ViaIsAddedOrAppended) {
  rebound::http::head_fields a;
  add_via(a);
  EXPECT_EQ(a[bhttp::field::via], "1.1 rebound");
  rebound::http::head_fields b;
  b.insert(bhttp::field::via, "1.0 fred");
  b.insert("X", "y");
  b.insert(bhttp::field::via, "1.1 p.example");
  add_via(b);
  EXPECT_EQ(b.count(bhttp::field::via), 1u);
  EXPECT_EQ(b[bhttp::field::via], "1.0 fred, 1.1 p.example, 1.1 rebound");
}

TEST(HopByHop, LongViaLinesAreFoldedWholeWithTheInstanceToken) {
  rebound::http::head_fields f;
  std::string const first(200, 'a'), second(300, 'b');
  f.insert(bhttp::field::via, "1.1 " + first);
  f.insert(bhttp::field::via, "1.1 " + second);
  add_via(f, 11, "tok123");
  EXPECT_EQ(f.count(bhttp::field::via), 1u);
  EXPECT_EQ(f[bhttp::field::via], "1.1 " + first + ", 1.1 " + second + ", 1.1 rebound (tok123)");
  rebound::http::head_fields g;
  add_via(g, 11, "tok123");
  EXPECT_EQ(g[bhttp::field::via], "1.1 rebound (tok123)");
}

TEST(HopByHop, ViaNamesTheVersionTheMessageWasReceivedIn) {
  rebound::http::head_fields f;
  add_via(f, 10);
  EXPECT_EQ(f[bhttp::field::via], "1.0 rebound");
}

TEST(HopByHop, TrailersThatFrameRouteOrAuthenticateAreNotForwarded) {
  for (auto name : {"Authorization", "Content-Length", "Transfer-Encoding", "Host", "Set-Cookie", "If-Match",
                    "Proxy-Authorization", "Trailer", "Retry-After"})
    EXPECT_FALSE(forwardable_trailer(bhttp::string_to_field(name), name)) << name;
  for (auto name : {"grpc-status", "X-Checksum", "Server-Timing", "Idempotency-Key", "X-Request-ID"})
    EXPECT_TRUE(forwardable_trailer(bhttp::string_to_field(name), name)) << name;
}
