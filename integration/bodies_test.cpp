// Bodies streamed both ways: Content-Length and chunked, large and small.
#include "helpers.hpp"

namespace itest::bodies_test {
namespace {

std::string pattern(std::size_t n, unsigned seed = 7) {
  std::string s(n, '\0');
  unsigned x = seed;
  for (auto& c : s) {
    x = x * 1103515245u + 12345u;
    c = static_cast<char>('a' + (x >> 16) % 26);
  }
  return s;
}

TEST(Bodies, ContentLengthRequestBodyReachesUpstreamIntact) {
  ScriptedUpstream up;
  Script s;
  s.echo_body = true;
  up.on("/echo", s);
  ReboundProcess rb;
  std::string body = pattern(300 * 1024);
  HttpClient client(rb.port());
  auto r = client.request("POST", "http://" + up.authority() + "/echo", {{"Content-Type", "text/plain"}}, body);
  EXPECT_EQ(r.status, 200u);
  EXPECT_TRUE(r.body == body) << "echoed body differs (size " << r.body.size() << ")";
  auto reqs = up.requests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_FALSE(reqs[0].chunked);
  EXPECT_EQ(reqs[0].header("Content-Length"), std::to_string(body.size()));
  EXPECT_TRUE(reqs[0].body == body);
}

// A kept body is read in 16 KiB reads (http::make_room_for_body), so its last read may take
// the start of a request pipelined behind it: that request stays the session's to answer.
TEST(Bodies, ARequestPipelinedBehindAKeptBodyIsAnsweredToo) {
  ScriptedUpstream up;
  Script s;
  s.echo_body = true;
  up.on("/echo", s);
  ReboundProcess rb;
  std::string const body = pattern(40 * 1024 + 17, 3);
  auto const post = absolute_request("POST", up.authority(), "/echo", {}, body);
  auto const post_chunked = chunked_request("POST", up.authority(), "/echo", body);
  RawConnection c(rb.port());
  // One write: the GET's bytes arrive with the bodies' last ones.
  ASSERT_TRUE(c.send(post + post_chunked + absolute_request("GET", up.authority(), "/after")));
  for (auto const* what : {"the POST with a length", "the chunked POST"}) {
    auto r = c.read_response();
    ASSERT_TRUE(r) << "no answer to " << what;
    EXPECT_EQ(r->status, 200u) << what;
    EXPECT_TRUE(r->body == body) << what << ": echoed " << r->body.size() << " bytes of " << body.size();
  }
  auto r = c.read_response();
  ASSERT_TRUE(r) << "no answer to the pipelined GET";
  EXPECT_EQ(r->status, 200u);
  EXPECT_EQ(r->body, "ok /after");
  EXPECT_EQ(up.request_count(), 3u);
}

// A chunked body that fits max_retry_body is kept for retries and goes out with a length
// (retry_test.cpp); one that outgrows it streams on, chunked, with what was read first.
TEST(Bodies, ChunkedRequestBodyOverMaxRetryBodyArrivesUpstreamChunked) {
  ScriptedUpstream up;
  Script s;
  s.echo_body = true;
  up.on("/chunked", s);
  ReboundOptions o;
  o.extra = "defaults:\n  max_retry_body: 1KiB\n";
  ReboundProcess rb(o);
  RawConnection c(rb.port());
  std::string head = "POST http://" + up.authority() + "/chunked HTTP/1.1\r\nHost: " + up.authority() +
                     "\r\nTransfer-Encoding: chunked\r\n\r\n";
  ASSERT_TRUE(c.send(head));
  std::string expected;
  for (std::size_t size : {5u, 1000u, 70000u, 1u}) {
    std::string piece = pattern(size, static_cast<unsigned>(size));
    expected += piece;
    char hex[32];
    std::snprintf(hex, sizeof hex, "%zx\r\n", piece.size());
    ASSERT_TRUE(c.send(hex + piece + "\r\n"));
  }
  ASSERT_TRUE(c.send("0\r\n\r\n"));
  auto r = c.read_response();
  ASSERT_TRUE(r) << c.last_error();
  EXPECT_EQ(r->status, 200u);
  EXPECT_TRUE(r->body == expected) << "echoed body differs (size " << r->body.size() << ")";
  auto reqs = up.requests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_TRUE(reqs[0].chunked) << "the upstream should receive the body chunked";
  EXPECT_EQ(reqs[0].header_count("Content-Length"), 0u);
  EXPECT_TRUE(reqs[0].body == expected);
}

TEST(Bodies, ChunkedResponseReachesClientIntact) {
  ScriptedUpstream up;
  Script s;
  s.chunks = {"alpha-", "beta-", pattern(100 * 1024), "-omega"};
  up.on("/chunks", s);
  ReboundProcess rb;
  RawConnection c(rb.port());
  ASSERT_TRUE(c.send(absolute_request("GET", up.authority(), "/chunks")));
  auto r = c.read_response();
  ASSERT_TRUE(r) << c.last_error();
  EXPECT_EQ(r->status, 200u);
  std::string expected = "alpha-beta-" + pattern(100 * 1024) + "-omega";
  EXPECT_TRUE(r->body == expected) << "body differs (size " << r->body.size() << ")";
  EXPECT_EQ(r->header_count("Content-Length") + (r->chunked ? 1u : 0u), 1u) << "exactly one framing";
  // The connection stays usable: the chunked body was framed correctly.
  ASSERT_TRUE(c.send(absolute_request("GET", up.authority(), "/next")));
  auto r2 = c.read_response();
  ASSERT_TRUE(r2) << c.last_error();
  EXPECT_EQ(r2->body, "ok /next");
}

TEST(Bodies, CloseDelimitedResponseReachesClientIntact) {
  ScriptedUpstream up;
  Script s;
  s.raw_response = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nbody delimited by the close";
  up.on("/eof", s);
  ReboundProcess rb;
  RawConnection c(rb.port());
  ASSERT_TRUE(c.send(absolute_request("GET", up.authority(), "/eof")));
  auto r = c.read_response();
  ASSERT_TRUE(r) << c.last_error();
  EXPECT_EQ(r->status, 200u);
  EXPECT_EQ(r->body, "body delimited by the close");
}

TEST(Bodies, LargeResponseBodyIsStreamedToClient) {
  ScriptedUpstream up;
  Script s;
  std::string big = pattern(8 * 1024 * 1024, 3);
  s.body = big;
  up.on("/big", s);
  ReboundProcess rb;
  HttpClient client(rb.port(), 60s);
  auto r = client.get("http://" + up.authority() + "/big");
  EXPECT_EQ(r.status, 200u);
  EXPECT_EQ(r.body.size(), big.size());
  EXPECT_TRUE(r.body == big);
}

TEST(Bodies, RequestBodyLimitZeroMeansUnlimited) {
  ScriptedUpstream up;
  Script s;
  s.body = "stored";
  up.on("/upload", s);
  ReboundOptions o;
  o.max_request_body = "0";
  ReboundProcess rb(o);
  std::string body = pattern(3 * 1024 * 1024, 11);
  HttpClient client(rb.port(), 60s);
  auto r = client.request("PUT", "http://" + up.authority() + "/upload", {}, body);
  EXPECT_EQ(r.status, 200u);
  EXPECT_EQ(r.body, "stored");
  auto reqs = up.requests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].body.size(), body.size());
  EXPECT_TRUE(reqs[0].body == body);
}

TEST(Bodies, ResponseBodyIsStreamedBeforeUpstreamFinishes) {
  ScriptedUpstream up;
  auto gate = std::make_shared<Gate>();
  Script s;
  s.chunks = {"first-part-", "second-part"};
  s.mid_body_gate = gate;  // the upstream sends the first chunk, then waits
  up.on("/stream", s);
  ReboundProcess rb;
  RawConnection c(rb.port());
  ASSERT_TRUE(c.send(absolute_request("GET", up.authority(), "/stream")));
  EXPECT_TRUE(c.read_until_contains("first-part-", 10s))
      << "the first chunk was held back until the upstream finished the response; received so far: \"" << c.buffered()
      << "\"";
  gate->open();
  EXPECT_TRUE(c.read_until_contains("second-part", 10s));
}

TEST(Bodies, RequestBodyIsStreamedBeforeClientFinishes) {
  ScriptedUpstream up;
  Script s;
  s.body = "got it";
  up.on("/stream-up", s);
  ReboundOptions o;
  o.max_request_body = "0";
  ReboundProcess rb(o);
  std::string body = pattern(4 * 1024 * 1024, 5);  // above the default max_retry_body (1MiB)
  std::size_t first = 64 * 1024;
  RawConnection c(rb.port());
  ASSERT_TRUE(c.send("POST http://" + up.authority() + "/stream-up HTTP/1.1\r\nHost: " + up.authority() +
                     "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body.substr(0, first)));
  EXPECT_TRUE(up.wait_for_requests(1, 10s)) << "the request head waited for the whole body";
  ASSERT_TRUE(c.send(std::string_view(body).substr(first)));
  auto r = c.read_response(30s);
  ASSERT_TRUE(r) << c.last_error();
  EXPECT_EQ(r->status, 200u);
  auto reqs = up.requests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_TRUE(reqs[0].body == body);
  // The body went out whole, so the client's connection carries its next request.
  EXPECT_FALSE(r->header("Connection").has_value()) << *r->header("Connection");
  ASSERT_TRUE(c.send(absolute_request("GET", up.authority(), "/stream-up")));
  auto r2 = c.read_response(10s);
  ASSERT_TRUE(r2) << c.last_error();
  EXPECT_EQ(r2->status, 200u);
}

}  // namespace
}  // namespace itest::bodies_test
