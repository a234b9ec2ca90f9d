// Ambiguous framing is refused with 400 bad_request, the connection closes, and nothing of the
// request (nor anything smuggled behind it) reaches the upstream.
#include "helpers.hpp"

namespace itest::smuggling_test {
namespace {

// Sends `framing` headers with `rest` (body + a smuggled request) and checks the rejection.
// A valid request on a fresh connection afterwards is the fence: once it has been answered,
// the upstream must have seen exactly that one request.
void expect_rejected_and_nothing_forwarded(const std::string& framing, const std::string& rest) {
  ScriptedUpstream up;
  ReboundProcess rb;
  RawConnection c(rb.port());
  std::string smuggled = "GET http://" + up.authority() + "/smuggled HTTP/1.1\r\nHost: " + up.authority() + "\r\n\r\n";
  ASSERT_TRUE(c.send("POST http://" + up.authority() + "/front HTTP/1.1\r\nHost: " + up.authority() + "\r\n" + framing +
                     "\r\n" + rest + smuggled));
  auto r = c.read_response(10s);
  EXPECT_TRUE(IsReboundError(r, 400, {"bad_request"}));
  EXPECT_TRUE(c.wait_closed(10s)) << "the connection must close after a framing error";

  auto fence = raw_exchange(rb.port(), absolute_request("GET", up.authority(), "/fence"));
  ASSERT_TRUE(fence) << last_exchange_error();
  EXPECT_EQ(fence->status, 200u);
  EXPECT_EQ(up.request_count("/front"), 0u) << "the ambiguous request reached the upstream";
  EXPECT_EQ(up.request_count("/smuggled"), 0u) << "a smuggled request reached the upstream";
  EXPECT_EQ(up.request_count(), 1u);
}

TEST(Smuggling, ContentLengthWithTransferEncodingIsRejected) {
  expect_rejected_and_nothing_forwarded("Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", "0\r\n\r\n");
}

TEST(Smuggling, TransferEncodingWithContentLengthIsRejected) {
  expect_rejected_and_nothing_forwarded("Transfer-Encoding: chunked\r\nContent-Length: 40\r\n", "0\r\n\r\n");
}

TEST(Smuggling, TwoDifferentContentLengthsAreRejected) {
  expect_rejected_and_nothing_forwarded("Content-Length: 5\r\nContent-Length: 6\r\n", "hello!");
}

TEST(Smuggling, ContentLengthListWithDifferentValuesIsRejected) {
  expect_rejected_and_nothing_forwarded("Content-Length: 5, 6\r\n", "hello!");
}

TEST(Smuggling, TransferEncodingNotEndingInChunkedIsRejected) {
  expect_rejected_and_nothing_forwarded("Transfer-Encoding: chunked, gzip\r\n", "0\r\n\r\n");
}

TEST(Smuggling, TransferEncodingWithoutChunkedIsRejected) {
  expect_rejected_and_nothing_forwarded("Transfer-Encoding: gzip\r\n", "0\r\n\r\n");
}

TEST(Smuggling, WhitespaceBeforeHeaderColonIsRejected) {
  expect_rejected_and_nothing_forwarded("Content-Length : 5\r\n", "hello");
}

}  // namespace
}  // namespace itest::smuggling_test
