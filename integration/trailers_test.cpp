// Trailers travel as trailers or not at all (RFC 9110 section 6.5.1): never merged into the
// header section, where a next hop would trust them as headers.
#include "helpers.hpp"

namespace itest::trailers_test {
namespace {

TEST(Trailers, ResponseTrailersReachTheClientAsTrailers) {
  ScriptedUpstream up;
  Script s;
  s.raw_response =
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
      "5\r\nhello\r\n0\r\nX-Checksum: abc123\r\nSet-Cookie: evil=1\r\n\r\n";
  up.on("/t", s);
  ReboundProcess rb;
  RawConnection c(rb.port());
  c.send(absolute_request("GET", up.authority(), "/t"));
  auto r = c.read_response(10s);
  ASSERT_TRUE(r) << c.last_error();
  EXPECT_EQ(r->status, 200u);
  EXPECT_EQ(r->body, "hello");
  EXPECT_TRUE(r->chunked);
  EXPECT_EQ(find_field(r->trailers, "X-Checksum").value_or(""), "abc123");
  EXPECT_FALSE(r->has("X-Checksum")) << "a trailer became a header";
  EXPECT_FALSE(find_field(r->trailers, "Set-Cookie")) << "Set-Cookie is not allowed in trailers";
  EXPECT_FALSE(r->has("Set-Cookie"));
}

// A streamed (once) chunked request body: trailers go on as trailers; those that carry
// credentials or identities the header section owns are dropped.
TEST(Trailers, R9_RequestTrailersNeverReplaceHeadersOnTheStreamedPath) {
  ScriptedUpstream up;
  ReboundOptions o;
  o.extra = "defaults:\n  max_retry_body: 1KiB\n";
  ReboundProcess rb(o);
  std::string const chunk(2000, 'x');
  RawConnection c(rb.port());
  c.send("POST http://" + up.authority() + "/up HTTP/1.1\r\nHost: " + up.authority() +
         "\r\nAuthorization: Bearer app\r\nIdempotency-Key: k-1\r\nX-Request-ID: head-id\r\n"
         "Transfer-Encoding: chunked\r\n\r\n7d0\r\n" +
         chunk +
         "\r\n0\r\nAuthorization: Bearer evil\r\n"
         "Idempotency-Key: k-2\r\nX-Request-ID: trailer-id\r\nX-Sum: 42\r\n\r\n");
  auto r = c.read_response(10s);
  ASSERT_TRUE(r) << c.last_error();
  EXPECT_EQ(r->status, 200u);
  auto reqs = up.requests();
  ASSERT_EQ(reqs.size(), 1u);
  auto const& q = reqs[0];
  EXPECT_EQ(q.body, chunk);
  EXPECT_EQ(q.header_count("Authorization"), 1u);
  EXPECT_EQ(q.header("Authorization").value_or(""), "Bearer app");
  EXPECT_EQ(q.header_count("Idempotency-Key"), 1u);
  EXPECT_EQ(q.header("Idempotency-Key").value_or(""), "k-1");
  EXPECT_EQ(q.header_count("X-Request-ID"), 1u);
  EXPECT_FALSE(find_field(q.trailers, "Authorization")) << "credentials never travel in trailers";
  EXPECT_EQ(find_field(q.trailers, "X-Sum").value_or(""), "42");
}

// A kept (retryable) body goes out with a Content-Length, which has no trailer section:
// the trailers are dropped, never merged.
TEST(Trailers, RequestTrailersOfAKeptBodyAreDroppedNotMerged) {
  ScriptedUpstream up;
  ReboundProcess rb;
  RawConnection c(rb.port());
  c.send("PUT http://" + up.authority() + "/kept HTTP/1.1\r\nHost: " + up.authority() +
         "\r\nX-Request-ID: head-id\r\nTransfer-Encoding: chunked\r\n\r\n"
         "5\r\nhello\r\n0\r\nAuthorization: Bearer evil\r\nX-Request-ID: trailer-id\r\n\r\n");
  auto r = c.read_response(10s);
  ASSERT_TRUE(r) << c.last_error();
  EXPECT_EQ(r->status, 200u);
  auto reqs = up.requests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].body, "hello");
  EXPECT_FALSE(reqs[0].header("Authorization"));
  EXPECT_EQ(reqs[0].header_count("X-Request-ID"), 1u);
  EXPECT_EQ(reqs[0].header("X-Request-ID").value_or(""), "head-id");
}

}  // namespace
}  // namespace itest::trailers_test
