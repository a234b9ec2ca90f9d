// Forwarding: target forms, Host, Via, hop-by-hop fields both ways, curl through http_proxy.
#include "helpers.hpp"

namespace itest::forwarding_test {
namespace {

TEST(Forwarding, AbsoluteFormReachesUpstreamInOriginForm) {
  ScriptedUpstream up;
  ReboundProcess rb;
  auto r = raw_exchange(rb.port(), absolute_request("GET", up.authority(), "/p/q?x=1&y=two"));
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->status, 200u);
  EXPECT_EQ(r->body, "ok /p/q?x=1&y=two");
  auto reqs = up.requests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].method, "GET");
  EXPECT_EQ(reqs[0].target, "/p/q?x=1&y=two");
  EXPECT_EQ(reqs[0].header_count("Host"), 1u);
  EXPECT_EQ(reqs[0].header("Host"), up.authority());
  EXPECT_TRUE(IsReboundRequestVia(reqs[0].header("Via").value_or("")));
}

TEST(Forwarding, OriginFormWithHostReachesUpstream) {
  ScriptedUpstream up;
  ReboundProcess rb;
  auto r = raw_exchange(rb.port(), "GET /origin?k=v HTTP/1.1\r\nHost: " + up.authority() + "\r\n\r\n");
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->status, 200u);
  EXPECT_EQ(r->body, "ok /origin?k=v");
  auto reqs = up.requests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].target, "/origin?k=v");
  EXPECT_EQ(reqs[0].header("Host"), up.authority());
  EXPECT_TRUE(IsReboundRequestVia(reqs[0].header("Via").value_or("")));
}

TEST(Forwarding, AbsoluteTargetAuthorityReplacesHostHeader) {
  ScriptedUpstream up;
  ReboundProcess rb;
  auto r = raw_exchange(rb.port(), "GET http://" + up.authority() + "/h HTTP/1.1\r\nHost: wrong.invalid:1\r\n\r\n");
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->status, 200u);
  auto reqs = up.requests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].header_count("Host"), 1u);
  EXPECT_EQ(reqs[0].header("Host"), up.authority()) << "the non-default port must be kept too";
}

TEST(Forwarding, UpstreamResponseIsRelayedWithViaAdded) {
  ScriptedUpstream up;
  Script s;
  s.status = 201;
  s.headers = {{"X-Custom", "kept"}, {"Set-Cookie", "a=1"}, {"Set-Cookie", "b=2"}};
  s.body = "created";
  up.on("/made", s);
  ReboundProcess rb;
  auto r = raw_exchange(rb.port(), absolute_request("POST", up.authority(), "/made", "", "payload"));
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->status, 201u);
  EXPECT_EQ(r->body, "created");
  EXPECT_EQ(r->header("X-Custom"), "kept");
  EXPECT_EQ(r->header_count("Set-Cookie"), 2u);
  EXPECT_EQ(r->header("Via"), "1.1 rebound");
  auto reqs = up.requests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].method, "POST");
  EXPECT_EQ(reqs[0].body, "payload");
}

TEST(Forwarding, RequestHopByHopFieldsAreRemoved) {
  ScriptedUpstream up;
  ReboundProcess rb;
  std::string extra =
      "Connection: keep-alive, X-Conn-Named\r\n"
      "X-Conn-Named: secret\r\n"
      "Proxy-Connection: keep-alive\r\n"
      "Keep-Alive: timeout=5\r\n"
      "TE: trailers\r\n"
      "Trailer: X-Trailer\r\n"
      "Upgrade: websocket\r\n"
      "Proxy-Authorization: Basic dXNlcjpwYXNz\r\n"
      "X-End-To-End: kept\r\n"
      "Authorization: Bearer app-token\r\n";
  auto r = raw_exchange(rb.port(), absolute_request("GET", up.authority(), "/hop", extra));
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->status, 200u);
  auto reqs = up.requests();
  ASSERT_EQ(reqs.size(), 1u);
  auto const& q = reqs[0];
  for (auto name :
       {"X-Conn-Named", "Proxy-Connection", "Keep-Alive", "TE", "Trailer", "Upgrade", "Proxy-Authorization"})
    EXPECT_EQ(q.header_count(name), 0u) << name << " reached the upstream";
  if (auto c = q.header("Connection")) {
    EXPECT_FALSE(contains(to_lower(*c), "x-conn-named")) << "Connection: " << *c;
    EXPECT_FALSE(contains(to_lower(*c), "upgrade")) << "Connection: " << *c;
  }
  EXPECT_EQ(q.header("X-End-To-End"), "kept");
  EXPECT_EQ(q.header("Authorization"), "Bearer app-token");
  EXPECT_TRUE(IsReboundRequestVia(q.header("Via").value_or("")));
}

TEST(Forwarding, ResponseHopByHopFieldsAreRemoved) {
  ScriptedUpstream up;
  Script s;
  s.headers = {{"Connection", "X-Resp-Named"},       {"X-Resp-Named", "secret"},
               {"Keep-Alive", "timeout=5, max=100"}, {"Proxy-Authenticate", "Basic realm=\"up\""},
               {"Proxy-Connection", "keep-alive"},   {"X-End-To-End", "kept"}};
  s.body = "hop";
  up.on("/hop", s);
  ReboundProcess rb;
  auto r = raw_exchange(rb.port(), absolute_request("GET", up.authority(), "/hop"));
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->status, 200u);
  EXPECT_EQ(r->body, "hop");
  for (auto name : {"X-Resp-Named", "Keep-Alive", "Proxy-Authenticate", "Proxy-Connection"})
    EXPECT_EQ(r->header_count(name), 0u) << name << " reached the client";
  if (auto c = r->header("Connection")) {
    EXPECT_FALSE(contains(to_lower(*c), "x-resp-named")) << "Connection: " << *c;
  }
  EXPECT_EQ(r->header("X-End-To-End"), "kept");
  EXPECT_EQ(r->header("Via"), "1.1 rebound");
}

TEST(Forwarding, ExistingViaIsKeptAndReboundAppended) {
  ScriptedUpstream up;
  ReboundProcess rb;
  auto r = raw_exchange(rb.port(), absolute_request("GET", up.authority(), "/via", "Via: 1.0 earlier-proxy\r\n"));
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->status, 200u);
  ASSERT_EQ(up.request_count(), 1u);
  std::string via;
  auto reqs = up.requests();
  for (auto const& [k, v] : reqs[0].headers)
    if (iequals(k, "Via")) via += (via.empty() ? "" : ", ") + v;
  EXPECT_TRUE(contains(via, "1.0 earlier-proxy")) << "Via: " << via;
  EXPECT_TRUE(IsReboundRequestVia(via.substr(std::min(via.size(), via.rfind(", ") + 2)))) << "Via: " << via;
}

TEST(Forwarding, CurlWithHttpProxyEnvGetsUpstreamResponse) {
  ScriptedUpstream up;
  Script s;
  s.body = "hello from upstream";
  up.on("/curl", s);
  ReboundProcess rb;
  auto r = curl(rb.port(), "http://" + up.authority() + "/curl?x=1");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.status, 200u);
  EXPECT_EQ(r.body, "hello from upstream");
  auto reqs = up.requests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].target, "/curl?x=1");
  EXPECT_EQ(reqs[0].header("Host"), up.authority());
  EXPECT_EQ(reqs[0].header_count("Proxy-Connection"), 0u);
  EXPECT_TRUE(IsReboundRequestVia(reqs[0].header("Via").value_or("")));
}

TEST(Forwarding, CurlPostBodyReachesUpstream) {
  ScriptedUpstream up;
  Script s;
  s.echo_body = true;
  up.on("/echo", s);
  ReboundProcess rb;
  auto r = curl(rb.port(), "http://" + up.authority() + "/echo", {"--data-binary", "name=rebound&n=1"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.status, 200u);
  EXPECT_EQ(r.body, "name=rebound&n=1");
  ASSERT_EQ(up.request_count("/echo"), 1u);
  EXPECT_EQ(up.requests()[0].method, "POST");
}

TEST(Forwarding, HeadResponseHasNoBodyAndConnectionStaysUsable) {
  ScriptedUpstream up;
  Script s;
  s.body = "0123456789";
  up.on("/head", s);
  ReboundProcess rb;
  RawConnection c(rb.port());
  ASSERT_TRUE(c.send(absolute_request("HEAD", up.authority(), "/head")));
  auto r = c.read_response(10s, /*head_request=*/true);
  ASSERT_TRUE(r) << c.last_error();
  EXPECT_EQ(r->status, 200u);
  EXPECT_EQ(r->header("Content-Length"), "10");
  ASSERT_TRUE(c.send(absolute_request("GET", up.authority(), "/after-head")));
  auto r2 = c.read_response();
  ASSERT_TRUE(r2) << "the HEAD response must not be followed by body bytes";
  EXPECT_EQ(r2->status, 200u);
  EXPECT_EQ(r2->body, "ok /after-head");
}

TEST(Forwarding, InterimResponseBeforeFinalIsHandled) {
  ScriptedUpstream up;
  Script s;
  s.interim = "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n";
  s.body = "final";
  up.on("/early", s);
  ReboundProcess rb;
  RawConnection c(rb.port());
  ASSERT_TRUE(c.send(absolute_request("GET", up.authority(), "/early")));
  std::optional<Response> r;
  do r = c.read_response();  // a relayed 103 is fine; the final response must follow
  while (r && r->status / 100 == 1);
  ASSERT_TRUE(r) << c.last_error();
  EXPECT_EQ(r->status, 200u);
  EXPECT_EQ(r->body, "final");
  ASSERT_TRUE(c.send(absolute_request("GET", up.authority(), "/next")));
  auto r2 = c.read_response();
  ASSERT_TRUE(r2) << c.last_error();
  EXPECT_EQ(r2->body, "ok /next");
}

// RFC 9110 section 15.2: a proxy forwards 1xx answers it did not ask for, on the retry
// path too (a GET is kept for retries, so its attempt reads the head in the retry loop).
TEST(Forwarding, EarlyHintsAndProcessingReachAnHttp11Client) {
  ScriptedUpstream up;
  Script s;
  s.interim = "HTTP/1.1 102 Processing\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n";
  s.body = "final";
  up.on("/early", s);
  ReboundProcess rb;
  RawConnection c(rb.port());
  ASSERT_TRUE(c.send(absolute_request("GET", up.authority(), "/early")));
  auto processing = c.read_response();
  ASSERT_TRUE(processing) << c.last_error();
  EXPECT_EQ(processing->status, 102u);
  auto hints = c.read_response();
  ASSERT_TRUE(hints) << c.last_error();
  EXPECT_EQ(hints->status, 103u);
  EXPECT_EQ(hints->reason, "Early Hints") << "the upstream's reason, not Beast's <unknown-status> (issue 29, 16)";
  EXPECT_EQ(processing->reason, "Processing");
  EXPECT_EQ(hints->header("Link").value_or(""), "</style.css>; rel=preload");
  auto r = c.read_response();
  ASSERT_TRUE(r) << c.last_error();
  EXPECT_EQ(r->status, 200u);
  EXPECT_EQ(r->body, "final");
}

TEST(Forwarding, ViaNamesHttp10ForAResponseReceivedAsHttp10) {
  ScriptedUpstream up;
  Script s;
  s.raw_response = "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok";
  up.on("/old", s);
  ReboundProcess rb;
  auto r = raw_exchange(rb.port(), absolute_request("GET", up.authority(), "/old"));
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->header("Via").value_or(""), "1.0 rebound");
}

TEST(Forwarding, NoContentResponseKeepsConnectionUsable) {
  ScriptedUpstream up;
  Script s;
  s.status = 204;
  up.on("/empty", s);
  ReboundProcess rb;
  RawConnection c(rb.port());
  ASSERT_TRUE(c.send(absolute_request("DELETE", up.authority(), "/empty")));
  auto r = c.read_response();
  ASSERT_TRUE(r) << c.last_error();
  EXPECT_EQ(r->status, 204u);
  EXPECT_EQ(r->body, "");
  EXPECT_EQ(r->header_count("Transfer-Encoding"), 0u) << "a 204 has no body framing";
  ASSERT_TRUE(c.send(absolute_request("GET", up.authority(), "/next")));
  auto r2 = c.read_response();
  ASSERT_TRUE(r2) << c.last_error();
  EXPECT_EQ(r2->body, "ok /next");
}

TEST(Forwarding, KeepAliveRequestsForDifferentUpstreamsReachTheRightOne) {
  ScriptedUpstream a;
  ScriptedUpstream b;
  ReboundProcess rb;
  RawConnection c(rb.port());
  for (int i = 0; i < 3; ++i) {
    for (auto* up : {&a, &b}) {
      std::string path = "/turn" + std::to_string(i);
      ASSERT_TRUE(c.send(absolute_request("GET", up->authority(), path)));
      auto r = c.read_response();
      ASSERT_TRUE(r) << c.last_error();
      EXPECT_EQ(r->status, 200u);
    }
  }
  EXPECT_EQ(a.request_count(), 3u);
  EXPECT_EQ(b.request_count(), 3u);
  for (auto const& q : a.requests()) EXPECT_EQ(q.header("Host"), a.authority());
  for (auto const& q : b.requests()) EXPECT_EQ(q.header("Host"), b.authority());
}

TEST(Forwarding, PipelinedRequestsAreAnsweredInOrder) {
  ScriptedUpstream up;
  ReboundProcess rb;
  RawConnection c(rb.port());
  ASSERT_TRUE(c.send(absolute_request("GET", up.authority(), "/first") +
                     absolute_request("GET", up.authority(), "/second") +
                     absolute_request("GET", up.authority(), "/third")));
  for (auto expected : {"ok /first", "ok /second", "ok /third"}) {
    auto r = c.read_response();
    ASSERT_TRUE(r) << "no response for " << expected;
    EXPECT_EQ(r->status, 200u);
    EXPECT_EQ(r->body, expected);
  }
  EXPECT_EQ(up.request_count(), 3u);
}

TEST(Forwarding, Http10RequestIsForwarded) {
  ScriptedUpstream up;
  ReboundProcess rb;
  auto r =
      raw_exchange(rb.port(), "GET http://" + up.authority() + "/old HTTP/1.0\r\nHost: " + up.authority() + "\r\n\r\n");
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->status, 200u);
  EXPECT_EQ(r->body, "ok /old");
  ASSERT_EQ(up.request_count(), 1u);
  EXPECT_EQ(up.requests()[0].target, "/old");
}

}  // namespace
}  // namespace itest::forwarding_test
