#include "proxy/http/message_rewrite.hpp"

#include <gtest/gtest.h>

#include <boost/asio/buffer.hpp>

#include <optional>
#include <string>
#include <string_view>

using namespace rebound::http;

namespace {

/// A request head as Beast parses it off the wire.
void parse(rebound::http::request_parser& p, std::string_view wire) {
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
  struct case_ {
    std::string_view target, host, wire, via_token, want_host, want_via;
  };
  for (auto const& c : {case_{"http://api.example:81/a?b=1", "", "GET http://api.example:81/a?b=1 HTTP/1.1\r\nHost: "
                              "api.example:81\r\nConnection: x-hop\r\nX-Hop: 1\r\n\r\n",
                              "tok", "api.example:81", "1.1 rebound (tok)"},
                        case_{"/a?b=1", "api.example", "GET /a?b=1 HTTP/1.1\r\nHost: api.example\r\n\r\n", "",
                              "api.example", "1.1 rebound"}}) {
    auto const t = parse_request_target("GET", c.target, c.host, c.host.empty() ? 0 : 1, 11);
    ASSERT_TRUE(t.value) << c.target;
    rebound::http::request_parser p;
    parse(p, c.wire);
    prepare_upstream_request(p.get(), p, *t.value, c.via_token);
    EXPECT_EQ(p.get().target(), "/a?b=1") << c.target;
    EXPECT_EQ(p.get()[bhttp::field::host], c.want_host);
    EXPECT_EQ(p.get()[bhttp::field::via], c.want_via);
    EXPECT_EQ(p.get().count("X-Hop"), 0u);
  }
}

namespace message_rewrite_test {

// Issue 49: a request rebuilt around a whole body (a delivered task, the inbound gate's call)
// was framed by two method lists that disagreed on OPTIONS and unknown methods; one rule now:
// Content-Length for a body or a method that anticipates one (RFC 9110 section 8.6).
TEST(MessageRewrite, ARebuiltRequestIsFramedByItsBodyAndItsMethod) {
  struct row {
    const char* method;
    std::size_t size;
    std::optional<std::string> content_length;
  };
  for (auto const& r : {row{"POST", 0, "0"}, row{"PUT", 0, "0"}, row{"PATCH", 0, "0"}, row{"POST", 5, "5"},
                        row{"GET", 0, std::nullopt}, row{"DELETE", 0, std::nullopt}, row{"OPTIONS", 0, std::nullopt},
                        row{"PURGE", 0, std::nullopt}, row{"DELETE", 3, "3"}}) {
    rebound::http::request_message<boost::beast::http::buffer_body> req;
    req.method_string(r.method);
    req.set(boost::beast::http::field::content_length, "99");  // whatever the stored head said
    req.set(boost::beast::http::field::transfer_encoding, "chunked");
    rebound::http::frame_whole_body(req, r.size);
    auto const cl = req.find(boost::beast::http::field::content_length);
    if (r.content_length)
      EXPECT_EQ(cl != req.end() ? std::string(cl->value()) : "none", *r.content_length) << r.method << " " << r.size;
    else
      EXPECT_EQ(cl, req.end()) << r.method;
    EXPECT_EQ(req.find(boost::beast::http::field::transfer_encoding), req.end()) << r.method;
  }
}

}  // namespace message_rewrite_test
