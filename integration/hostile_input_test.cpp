// Hostile input on every port rebound reads: the process answers or closes, and stays up.
// Each case ends with the same proof of health: /healthz answers and a normal request is
// forwarded.
#include "helpers.hpp"

namespace itest::hostile_input_test {
namespace {

// A chunked message whose trailer section holds one field of `size` bytes: Beast 1.81's
// fields cannot hold a name or value of 65,534 bytes or more and throw std::length_error.
std::string chunked_with_trailer(std::size_t size) {
  return "5\r\nhello\r\n0\r\nX-Big: " + std::string(size, 'a') + "\r\n\r\n";
}

void expect_healthy(const ReboundProcess& rb, const ScriptedUpstream& up) {
  ASSERT_TRUE(rb.running()) << "rebound died: " << rb.stderr_text();
  EXPECT_EQ(admin_get_status(rb.admin_port(), "/healthz"), 200u);
  auto r = raw_exchange(rb.port(), absolute_request("GET", up.authority(), "/after"));
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->status, 200u);
}

TEST(HostileInput, HugeRequestTrailerIsRefusedAndTheProcessLives) {
  ScriptedUpstream up;
  ReboundProcess rb;
  for (std::size_t size : {65'534u, 70'000u, 200'000u}) {
    RawConnection c(rb.port());
    c.send("POST http://" + up.authority() + "/t HTTP/1.1\r\nHost: " + up.authority() +
           "\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked_with_trailer(size));
    auto r = c.read_response(10s);
    EXPECT_TRUE(IsReboundError(r, 400, {"bad_request"})) << "trailer of " << size << " bytes";
    expect_healthy(rb, up);
  }
  EXPECT_EQ(up.request_count("/t"), 0u) << "a request with a refused trailer must not reach the upstream";
}

TEST(HostileInput, HugeTrailerOnTheAdminPortIsRefusedAndTheProcessLives) {
  ScriptedUpstream up;
  ReboundProcess rb;
  RawConnection c(rb.admin_port());
  c.send("POST /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked_with_trailer(65'534));
  auto r = c.read_response(10s);
  ASSERT_TRUE(r) << c.last_error();
  EXPECT_GE(r->status, 400u);
  expect_healthy(rb, up);
}

TEST(HostileInput, HugeTrailerFromTheUpstreamIsAnUpstreamErrorAndTheProcessLives) {
  ScriptedUpstream up;
  Script s;
  s.raw_response = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked_with_trailer(65'534);
  up.on("/t", s);
  ReboundProcess rb;
  RawConnection c(rb.port());
  c.send(absolute_request("GET", up.authority(), "/t"));
  // The head and body went out before the trailer arrived: the client sees a cut response.
  c.read_until_eof(10s);
  expect_healthy(rb, up);
}

TEST(HostileInput, HeaderFieldBeastCannotHoldIsRefusedEvenUnderALargeHeadLimit) {
  ScriptedUpstream up;
  ReboundOptions o;
  o.max_request_head = "1MiB";
  ReboundProcess rb(o);
  RawConnection c(rb.port());
  c.send(absolute_request("GET", up.authority(), "/h", "X-Big: " + std::string(70'000, 'b') + "\r\n"));
  auto r = c.read_response(10s);
  EXPECT_TRUE(IsReboundError(r, 431, {"bad_request"}));
  expect_healthy(rb, up);
  EXPECT_EQ(up.request_count("/h"), 0u);
}

TEST(HostileInput, AForwardingLoopToTheOwnListenerIsRefusedWith508) {
  ScriptedUpstream up;
  ReboundProcess rb;
  for (std::string host : {"127.0.0.1", "localhost"}) {
    auto const authority = host + ":" + std::to_string(rb.port());
    auto r = raw_exchange(rb.port(), absolute_request("GET", authority, "/loop"));
    EXPECT_TRUE(IsReboundError(r, 508, {"loop_detected"})) << authority;
  }
  expect_healthy(rb, up);
}

// A request that comes back carrying this instance's own Via mark (a name that resolves to
// rebound, another proxy in between) is refused on its second pass, not forwarded forever.
TEST(HostileInput, ARequestCarryingTheOwnViaMarkIsRefusedWith508) {
  ScriptedUpstream up;
  ReboundProcess rb;
  ASSERT_TRUE(raw_exchange(rb.port(), absolute_request("GET", up.authority(), "/learn")));
  auto const via = up.requests().at(0).header("Via").value_or("");
  ASSERT_TRUE(IsReboundRequestVia(via));
  auto r =
      raw_exchange(rb.port(), absolute_request("GET", up.authority(), "/again", "Via: 1.1 other, " + via + "\r\n"));
  EXPECT_TRUE(IsReboundError(r, 508, {"loop_detected"}));
  EXPECT_EQ(up.request_count("/again"), 0u);
  // Another instance's mark is a chain, not a loop.
  auto other =
      raw_exchange(rb.port(), absolute_request("GET", up.authority(), "/chain", "Via: 1.1 rebound (00000000)\r\n"));
  ASSERT_TRUE(other) << last_exchange_error();
  EXPECT_EQ(other->status, 200u);
}

TEST(HostileInput, ANumericHostIsNotResolvedAsAnAddress) {
  ScriptedUpstream up;
  ReboundProcess rb;
  auto r = raw_exchange(rb.port(), absolute_request("GET", "2130706433:" + std::to_string(up.port()), "/n"));
  EXPECT_TRUE(IsReboundError(r, 400, {"bad_request"}));
  EXPECT_EQ(up.request_count(), 0u);
}

}  // namespace
}  // namespace itest::hostile_input_test
