#include "proxy/http/message_rewrite.hpp"
#include "proxy/wire/wire_head.hpp"
#include "tests/proxy/wire/parse_head.hpp"

#include <gtest/gtest.h>

#include <boost/asio/buffer.hpp>

#include <optional>
#include <string>
#include <string_view>

using namespace rebound::http;

namespace {

using rebound::http::testing::parse_head;

}  // namespace

TEST(MessageRewrite, AbsoluteFormBecomesOriginFormAndAnOriginFormTargetStaysAsItIs) {
  struct case_ {
    std::string_view target, host, wire, via_token, want_host, want_via;
  };
  for (auto const& c : {case_{"http://api.example:81/a?b=1", "", "GET http://api.example:81/a?b=1 HTTP/1.1\r\nHost: "
                              "api.example:81\r\nConnection: x-hop\r\nX-Hop: 1\r\n\r\n",
                              "tok", "api.example:81", "1.1 rebound (tok)"},
                        case_{"/a?b=1", "api.example", "GET /a?b=1 HTTP/1.1\r\nHost: api.example\r\n\r\n", "",
                              "api.example", "1.1 rebound"}}) {
    auto const t = rebound::plan::parse_request_target("GET", c.target, c.host, c.host.empty() ? 0 : 1, 11);
    ASSERT_TRUE(t.value) << c.target;
    rebound::http::request_parser p;
    parse_head(p, c.wire);
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
namespace {

/// The head rebound sends its client for an upstream's `wire`, answering `client`.
std::string client_head(std::string_view wire, const client_side& client, bool* keep = nullptr) {
  field_list fields;
  response_parser p(fields);
  if (client.is_head) p.skip(true);
  parse_head(p, wire);
  bool const kept = prepare_client_response(p, client);
  if (keep) *keep = kept;
  std::string out;
  append_head(out, p);
  return out;
}

}  // namespace

TEST(MessageRewrite, TheClientsResponseHeadIsReframedForItsHopWithViaAndAttempts) {
  bool keep = false;
  // Hop-by-hop fields go, Via gains this hop (naming the version received), Content-Length stays.
  EXPECT_EQ(client_head("HTTP/1.0 200 OK\r\nVia: 1.1 lb\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\n"
                        "Content-Length: 2\r\nKeep-Alive: timeout=5\r\nETag: \"a\"\r\n\r\nok",
                        {false, 11, true, 1}, &keep),
            "HTTP/1.1 200 OK\r\nETag: \"a\"\r\nVia: 1.1 lb, 1.0 rebound\r\nContent-Length: 2\r\n"
            "Rebound-Attempts: 1\r\n\r\n");
  EXPECT_TRUE(keep);
  // A chunked answer to an HTTP/1.1 client stays chunked, rebound's own framing.
  EXPECT_EQ(client_head("HTTP/1.1 503 Busy\r\nTransfer-Encoding: chunked\r\nRetry-After: 2\r\n\r\n",
                        {false, 11, false, 3, true}, &keep),
            "HTTP/1.1 503 Busy\r\nRetry-After: 2\r\nVia: 1.1 rebound\r\nTransfer-Encoding: chunked\r\n"
            "Rebound-Attempts: 3\r\nRebound-Retried: exhausted\r\nConnection: close\r\n\r\n");
  EXPECT_FALSE(keep);
  // An HTTP/1.0 client learns a close-delimited body's end from the close.
  EXPECT_EQ(client_head("HTTP/1.1 200 OK\r\n\r\n", {false, 10, true, 1}, &keep),
            "HTTP/1.1 200 OK\r\nVia: 1.1 rebound\r\nRebound-Attempts: 1\r\nConnection: close\r\n\r\n");
  EXPECT_FALSE(keep);
  // ...and one that may keep its connection is told so, as HTTP/1.0 needs.
  EXPECT_EQ(client_head("HTTP/1.1 204 No Content\r\n\r\n", {false, 10, true, 1}, &keep),
            "HTTP/1.1 204 No Content\r\nVia: 1.1 rebound\r\nRebound-Attempts: 1\r\nConnection: keep-alive\r\n\r\n");
  EXPECT_TRUE(keep);
  // The answer to HEAD keeps the length the upstream announced.
  EXPECT_EQ(client_head("HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n", {true, 11, true, 1}),
            "HTTP/1.1 200 OK\r\nContent-Length: 99\r\nVia: 1.1 rebound\r\nRebound-Attempts: 1\r\n\r\n");
}

}  // namespace message_rewrite_test
