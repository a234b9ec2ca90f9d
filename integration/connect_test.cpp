// CONNECT: "200 Connection established" without Content-Length, then a byte tunnel both ways
// with half-close.
#include "helpers.hpp"

namespace itest {
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

TEST(Connect, RefusedTargetGets502) {
  ReboundProcess rb;
  RawConnection c(rb.port());
  ASSERT_TRUE(c.send(connect_request("127.0.0.1:" + std::to_string(free_port()))));
  auto r = c.read_response(15s);
  EXPECT_TRUE(IsReboundError(r, 502, {"connect_refused"}));
}

}  // namespace
}  // namespace itest
