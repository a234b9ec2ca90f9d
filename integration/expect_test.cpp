// Expect: 100-continue is forwarded; the 100 comes from the upstream, or from rebound when the
// upstream stays silent; an early final status from the upstream reaches the client.
#include "helpers.hpp"

namespace itest::expect_test {
namespace {

std::string expect_head(const std::string& authority, const std::string& path, std::size_t length) {
  return "POST http://" + authority + path + " HTTP/1.1\r\nHost: " + authority +
         "\r\nExpect: 100-continue\r\nContent-Length: " + std::to_string(length) + "\r\n\r\n";
}

TEST(Expect, UpstreamContinueIsRelayedToClient) {
  ScriptedUpstream up;
  Script s;
  s.on_expect = OnExpect::send_100;
  s.echo_body = true;
  up.on("/upload", s);
  ReboundProcess rb;
  RawConnection c(rb.port());
  std::string body = "the body after 100";
  ASSERT_TRUE(c.send(expect_head(up.authority(), "/upload", body.size())));
  auto interim = c.read_response(10s);
  ASSERT_TRUE(interim) << "no 100 Continue";
  ASSERT_EQ(interim->status, 100u);
  ASSERT_TRUE(c.send(body));
  auto r = c.read_response(10s);
  ASSERT_TRUE(r) << c.last_error();
  EXPECT_EQ(r->status, 200u);
  EXPECT_EQ(r->body, body);
  auto reqs = up.requests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_TRUE(iequals(reqs[0].header("Expect").value_or(""), "100-continue")) << "Expect was not forwarded";
  EXPECT_EQ(reqs[0].body, body);
}

TEST(Expect, SilentUpstreamGetsContinueFromRebound) {
  ScriptedUpstream up;
  Script s;
  s.on_expect = OnExpect::silent;
  s.echo_body = true;
  up.on("/upload", s);
  ReboundProcess rb;
  RawConnection c(rb.port());
  std::string body = "sent after rebound's own 100";
  ASSERT_TRUE(c.send(expect_head(up.authority(), "/upload", body.size())));
  auto interim = c.read_response(10s);  // rebound answers after ~1 s; 10 s is a generous bound
  ASSERT_TRUE(interim) << "rebound never sent 100 Continue for a silent upstream";
  ASSERT_EQ(interim->status, 100u);
  ASSERT_TRUE(c.send(body));
  auto r = c.read_response(10s);
  ASSERT_TRUE(r) << c.last_error();
  EXPECT_EQ(r->status, 200u);
  EXPECT_EQ(r->body, body);
  ASSERT_EQ(up.request_count(), 1u);
  EXPECT_EQ(up.requests()[0].body, body);
}

TEST(Expect, EarlyFinalStatusFromUpstreamReachesClient) {
  ScriptedUpstream up;
  Script s;
  s.on_expect = OnExpect::final_early;
  s.status = 401;
  s.body = "no credentials, keep your body";
  up.on("/upload", s);
  ReboundProcess rb;
  RawConnection c(rb.port());
  ASSERT_TRUE(c.send(expect_head(up.authority(), "/upload", 1000000)));
  auto r = c.read_response(10s);
  ASSERT_TRUE(r) << "no response while the body was withheld";
  EXPECT_EQ(r->status, 401u);
  EXPECT_EQ(r->body, "no credentials, keep your body");
  EXPECT_EQ(r->header("Via"), "1.1 rebound");
}

}  // namespace
}  // namespace itest::expect_test
