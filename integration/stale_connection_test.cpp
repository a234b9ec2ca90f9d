// Pooled upstream connections that died while idle (upstream restarts, short keep-alive
// timeouts): a request is resent only whole and only when it is safe to send twice (R-6,
// RFC 9110 section 9.2.2); a request that cannot be resent never rides a pooled connection.
#include "helpers.hpp"

namespace itest::stale_connection_test {
namespace {

// A keep-alive answer after which the upstream closes the connection anyway: the pool holds
// a dead connection, as after an upstream restart or its keep-alive timeout.
Script closes_after_answering() {
  Script s;
  s.close_silently = true;
  return s;
}

// Warms rebound's pool with one connection that the upstream then closes, and waits until
// the upstream has closed it.
void leave_a_dead_pooled_connection(ReboundProcess& rb, ScriptedUpstream& up) {
  up.on("/warm", closes_after_answering());
  auto r = raw_exchange(rb.port(), absolute_request("GET", up.authority(), "/warm"));
  ASSERT_TRUE(r) << last_exchange_error();
  ASSERT_EQ(r->status, 200u);
  for (int i = 0; i < 1000 && up.closed_connections() < 1; ++i) std::this_thread::sleep_for(2ms);
  ASSERT_GE(up.closed_connections(), 1u);
}

std::string pattern(std::size_t n) {
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<char>('a' + i % 26);
  return s;
}

TEST(StaleConnection, R6_AStreamedBodyArrivesWholeAfterTheUpstreamClosedThePool) {
  ScriptedUpstream up;
  ReboundOptions o;
  o.extra = "defaults:\n  max_retry_body: 1KiB\n";
  ReboundProcess rb(o);
  leave_a_dead_pooled_connection(rb, up);
  auto const body = pattern(64 * 1024);
  auto r =
      raw_exchange(rb.port(), absolute_request("POST", up.authority(), "/upload", "Idempotency-Key: k-1\r\n", body));
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->status, 200u);
  auto got = up.requests();
  std::size_t uploads = 0;
  for (auto const& q : got) {
    if (q.path() != "/upload") continue;
    ++uploads;
    EXPECT_TRUE(q.complete);
    EXPECT_EQ(q.body.size(), body.size());
    EXPECT_TRUE(q.body == body) << "the upstream must never see the head without its body";
  }
  EXPECT_EQ(uploads, 1u);
}

TEST(StaleConnection, R6_ExpectContinueUploadSucceedsAfterTheUpstreamClosedThePool) {
  ScriptedUpstream up;
  ReboundProcess rb;
  leave_a_dead_pooled_connection(rb, up);
  RawConnection c(rb.port());
  auto const body = pattern(5000);
  c.send("PUT http://" + up.authority() + "/put HTTP/1.1\r\nHost: " + up.authority() +
         "\r\nExpect: 100-continue\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n");
  auto interim = c.read_response(10s);
  ASSERT_TRUE(interim) << c.last_error();
  ASSERT_EQ(interim->status, 100u) << "no 502 for a connection nothing refused";
  c.send(body);
  auto r = c.read_response(10s);
  ASSERT_TRUE(r) << c.last_error();
  EXPECT_EQ(r->status, 200u);
  EXPECT_EQ(up.request_count("/put"), 1u);
}

// The upstream reads the request, processes it, and drops the connection without an answer.
Script processes_then_drops() {
  Script s;
  s.reset = true;
  return s;
}

void expect_delivered_once(const std::string& body) {
  ScriptedUpstream up;
  ReboundOptions o;
  o.extra = "defaults:\n  idempotency: {inject: false}\n";
  ReboundProcess rb(o);
  // A healthy pooled connection first: the POST must still not ride on it.
  ASSERT_TRUE(raw_exchange(rb.port(), absolute_request("GET", up.authority(), "/warm")));
  up.on("/pay", processes_then_drops());
  auto r = raw_exchange(rb.port(), absolute_request("POST", up.authority(), "/pay", {}, body));
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->status, 502u);
  EXPECT_EQ(r->header("Rebound-Attempts").value_or(""), "1");
  // The fence: a later request has been answered, so a resend would have arrived by now.
  up.on("/fence", Script{});
  ASSERT_TRUE(raw_exchange(rb.port(), absolute_request("GET", up.authority(), "/fence")));
  EXPECT_EQ(up.request_count("/pay"), 1u) << "a POST without an idempotency key was delivered twice";
}

TEST(StaleConnection, R6_APostWithoutAKeyAndWithABodyIsNeverDeliveredTwice) { expect_delivered_once("amount=10"); }

TEST(StaleConnection, R6_APostWithoutAKeyOrBodyIsNeverDeliveredTwice) { expect_delivered_once(""); }

TEST(StaleConnection, AnIdempotentRequestOnADeadPooledConnectionIsResentAndAnswered) {
  ScriptedUpstream up;
  ReboundOptions o;
  o.extra = "defaults:\n  max_retries: 1\n";
  ReboundProcess rb(o);
  leave_a_dead_pooled_connection(rb, up);
  auto r = raw_exchange(rb.port(), absolute_request("GET", up.authority(), "/get"));
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->status, 200u);
  EXPECT_EQ(r->header("Rebound-Attempts").value_or(""), "1") << "the resend is not a retry";
}

}  // namespace
}  // namespace itest::stale_connection_test
