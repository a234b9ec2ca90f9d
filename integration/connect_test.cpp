// CONNECT: "200 Connection established" without Content-Length, then a byte tunnel both ways
// with half-close.
#include "helpers.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

namespace itest::connect_test {
namespace {

std::string connect_request(const std::string& authority) {
  return "CONNECT " + authority + " HTTP/1.1\r\nHost: " + authority + "\r\n\r\n";
}

void expect_established(const std::optional<Response>& head) {
  ASSERT_TRUE(head) << "no answer to CONNECT";
  EXPECT_EQ(head->status, 200u);
  EXPECT_EQ(head->reason, "Connection established");
  EXPECT_EQ(head->header_count("Content-Length"), 0u) << "a 2xx to CONNECT has no Content-Length";
  EXPECT_EQ(head->header_count("Transfer-Encoding"), 0u);
}

TEST(Connect, TunnelCarriesBytesBothWaysWithHalfClose) {
  TcpServer target(collect_then_reply_handler());  // reads to EOF, then answers, then closes
  ReboundProcess rb;
  RawConnection c(rb.port());
  ASSERT_TRUE(c.send(connect_request(target.authority())));
  expect_established(c.read_head());
  ASSERT_TRUE(c.send("hello "));
  ASSERT_TRUE(c.send("through the tunnel"));
  c.shutdown_write();  // the target sees EOF only through the half-close
  bool eof = false;
  std::string got = c.read_until_eof(10s, &eof);
  EXPECT_EQ(got, "got:hello through the tunnel");
  EXPECT_TRUE(eof) << "the tunnel should close once the target closed";
  EXPECT_EQ(target.connections(), 1u);
}

TEST(Connect, TunnelIsInteractiveAndCarriesBinaryData) {
  TcpServer target(echo_handler());
  ReboundProcess rb;
  RawConnection c(rb.port());
  ASSERT_TRUE(c.send(connect_request(target.authority())));
  expect_established(c.read_head());
  for (int i = 0; i < 20; ++i) {
    std::string msg = "ping " + std::to_string(i) + std::string("\0\r\n\xff", 4);
    ASSERT_TRUE(c.send(msg));
    EXPECT_EQ(c.read_exactly(msg.size()), msg) << "round trip " << i;
  }
  std::string big(1024 * 1024, 'x');
  for (std::size_t k = 0; k < big.size(); k += 977) big[k] = static_cast<char>(k % 251);
  ASSERT_TRUE(c.send(big));
  EXPECT_TRUE(c.read_exactly(big.size(), 20s) == big);
  c.shutdown_write();
  bool eof = false;
  c.read_until_eof(10s, &eof);
  EXPECT_TRUE(eof);
}

TEST(Connect, BytesSentRightAfterConnectHeadAreTunnelled) {
  TcpServer target(echo_handler());
  ReboundProcess rb;
  RawConnection c(rb.port());
  ASSERT_TRUE(c.send(connect_request(target.authority()) + "early bytes"));
  expect_established(c.read_head());
  EXPECT_EQ(c.read_exactly(11), "early bytes") << "bytes buffered with the CONNECT head were lost";
}

ReboundOptions fast_retries(const std::string& more = {}) {
  ReboundOptions o;
  o.extra = "defaults:\n  backoff: {base: 1ms, cap: 2ms}\n" + more;
  return o;
}

TEST(Connect, R4_RefusedConnectIsRetriedThenAnswered502WithTheAttempts) {
  ReboundProcess rb(fast_retries());
  RefusingPort const refusing;
  auto const dead = refusing.authority();
  RawConnection c(rb.port());
  ASSERT_TRUE(c.send(connect_request(dead)));
  auto r = c.read_response(15s);
  ASSERT_TRUE(IsReboundError(r, 502, {"connect_refused"}));
  auto const body = parse_json(r->body);
  ASSERT_TRUE(body);
  EXPECT_EQ(body->get("error")->get("attempts")->n, 4) << "max_retries 3: four connects";
  ASSERT_TRUE(rb.wait_for_log("\"retry_exhausted\""));
  EXPECT_NE(rb.stdout_text().find("\"method\":\"CONNECT\""), std::string::npos);
}

// CONNECT's retries take the configured jitter too. With base = cap, decorrelated
// jitter waits exactly the base every time, while full jitter (which the CONNECT path used
// whatever the config said) draws below it.
TEST(Connect, R1_DecorrelatedJitterIsHonouredForConnectRetries) {
  ReboundOptions o;
  o.extra = "defaults:\n  max_retries: 3\n  backoff: {base: 40ms, cap: 40ms, jitter: decorrelated}\n";
  ReboundProcess rb(o);
  RefusingPort const refusing;
  auto const dead = refusing.authority();
  RawConnection c(rb.port());
  ASSERT_TRUE(c.send(connect_request(dead)));
  auto r = c.read_response(15s);
  ASSERT_TRUE(IsReboundError(r, 502, {"connect_refused"}));
  ASSERT_TRUE(rb.wait_for_log("\"retry_exhausted\""));
  auto const logs = rb.stdout_text();
  std::size_t retries = 0;
  for (auto at = logs.find("\"retry_attempt\""); at != std::string::npos; at = logs.find("\"retry_attempt\"", at + 1)) {
    auto const line = logs.substr(logs.rfind('\n', at) + 1, logs.find('\n', at) - logs.rfind('\n', at) - 1);
    EXPECT_NE(line.find("\"backoff_ms\":40"), std::string::npos) << line;
    ++retries;
  }
  EXPECT_EQ(retries, 3u);
}

// CONNECT's retries go through the one retry step, so their log lines carry the
// client's correlation id like any request's (they carried an empty one before).
TEST(Connect, R10_ConnectRetryLogsCarryTheClientsCorrelationId) {
  ReboundProcess rb(fast_retries());
  RefusingPort const refusing;
  auto const dead = refusing.authority();
  RawConnection c(rb.port());
  ASSERT_TRUE(c.send("CONNECT " + dead + " HTTP/1.1\r\nHost: " + dead + "\r\nX-Request-ID: tunnel-7\r\n\r\n"));
  auto r = c.read_response(15s);
  ASSERT_TRUE(IsReboundError(r, 502, {"connect_refused"}));
  ASSERT_TRUE(rb.wait_for_log("\"upstream_error\""));
  auto const logs = rb.stdout_text();
  for (auto const* event : {"\"retry_attempt\"", "\"retry_exhausted\"", "\"upstream_error\""}) {
    auto const at = logs.find(event);
    ASSERT_NE(at, std::string::npos) << event;
    auto const line = logs.substr(logs.rfind('\n', at) + 1, logs.find('\n', at) - logs.rfind('\n', at) - 1);
    EXPECT_NE(line.find("\"correlation_id\":\"tunnel-7\""), std::string::npos) << line;
  }
}

// A listener that appears on a fixed port only after rebound's first connect was refused.
TEST(Connect, R4_ConnectRetriedUntilTheTargetListensThenTunnels) {
  ReboundOptions o;
  o.extra = "defaults:\n  max_retries: 5\n  total_timeout: 20s\n  backoff: {base: 300ms, cap: 300ms}\n";
  ReboundProcess rb(o);
  RefusingPort target;
  RawConnection c(rb.port());
  ASSERT_TRUE(c.send(connect_request(target.authority())));
  ASSERT_TRUE(rb.wait_for_log("\"retry_attempt\"")) << "the first connect was refused and a retry scheduled";

  int const fd = target.start_listening();
  std::thread echo([fd] {
    int const conn = ::accept(fd, nullptr, nullptr);
    if (conn < 0) return;
    char buf[256];
    auto const n = ::read(conn, buf, sizeof buf);
    if (n > 0) (void)::write(conn, buf, static_cast<std::size_t>(n));
    ::close(conn);
  });
  expect_established(c.read_head(15s));
  ASSERT_TRUE(c.send("ping"));
  EXPECT_EQ(c.read_exactly(4), "ping");
  echo.join();
}

TEST(Connect, R7_OpenBreakerRefusesConnectWithoutTouchingTheTarget) {
  ReboundProcess rb(fast_retries("  max_retries: 1\n  circuit_breaker: {min_requests: 2, open_for: 1h}\n"));
  RefusingPort const refusing;
  auto const dead = refusing.authority();
  EXPECT_TRUE(IsReboundError(raw_exchange(rb.port(), connect_request(dead)), 502, {"connect_refused"}));
  auto r = raw_exchange(rb.port(), connect_request(dead));
  ASSERT_TRUE(IsReboundError(r, 503, {"circuit_open"}));
  EXPECT_TRUE(r->header("Retry-After"));
}

}  // namespace
}  // namespace itest::connect_test
