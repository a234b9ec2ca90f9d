#include "proxy/http/message_rewrite.hpp"

#include <gtest/gtest.h>

#include <boost/asio/buffer.hpp>

#include <string_view>

using namespace rebound::http;

namespace {

/// A request head as Beast parses it off the wire.
void parse(bhttp::request_parser<bhttp::buffer_body>& p, std::string_view wire) {
  boost::beast::error_code ec;
  p.eager(false);
  p.put(boost::asio::buffer(wire.data(), wire.size()), ec);
  ASSERT_FALSE(ec) << ec.message();
  ASSERT_TRUE(p.is_header_done());
}

}  // namespace

TEST(MessageRewrite, PoolKeyNamesSchemeHostAndPortOfTheTarget) {
  request_target t;
  t.scheme = "http";
  t.connect_host = "2001:db8::1";
  t.port = 8080;
  EXPECT_EQ(pool_key(t, nullptr), "http://2001:db8::1:8080");
  t.connect_host = "a-rather-long-internal-name.payments.svc.cluster.local";
  t.port = 80;
  EXPECT_EQ(pool_key(t, nullptr), "http://a-rather-long-internal-name.payments.svc.cluster.local:80");
}

TEST(MessageRewrite, AbsoluteFormBecomesOriginFormAndAnOriginFormTargetStaysAsItIs) {
  auto const absolute = parse_request_target("GET", "http://api.example:81/a?b=1", "", 0, 11);
  ASSERT_TRUE(absolute.value);
  bhttp::request_parser<bhttp::buffer_body> p;
  parse(p, "GET http://api.example:81/a?b=1 HTTP/1.1\r\nHost: api.example:81\r\nConnection: x-hop\r\nX-Hop: 1\r\n\r\n");
  prepare_upstream_request(p.get(), p, *absolute.value, "tok");
  EXPECT_EQ(p.get().target(), "/a?b=1");
  EXPECT_EQ(p.get()[bhttp::field::host], "api.example:81");
  EXPECT_EQ(p.get()[bhttp::field::via], "1.1 rebound (tok)");
  EXPECT_EQ(p.get().count("X-Hop"), 0u);

  auto const origin = parse_request_target("GET", "/a?b=1", "api.example", 1, 11);
  ASSERT_TRUE(origin.value);
  bhttp::request_parser<bhttp::buffer_body> q;
  parse(q, "GET /a?b=1 HTTP/1.1\r\nHost: api.example\r\n\r\n");
  prepare_upstream_request(q.get(), q, *origin.value, "");
  EXPECT_EQ(q.get().target(), "/a?b=1");
  EXPECT_EQ(q.get()[bhttp::field::host], "api.example");
}
