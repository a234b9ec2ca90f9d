// Errors rebound makes itself: status, Rebound-Error and the JSON body, per failure type.
#include "helpers.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace itest::errors_test {
namespace {

// A 127.0.0.1 listener that never accepts, its backlog filled: further SYNs are dropped, so a
// connect to it hangs (the connect phase of an attempt times out).
class BlackholeListener {
 public:
  BlackholeListener() {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    ::listen(listen_fd_, 0);
    socklen_t len = sizeof addr;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    for (int i = 0; i < 4; ++i) {
      int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
      ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
      fillers_.push_back(fd);
    }
  }
  ~BlackholeListener() {
    for (int fd : fillers_) ::close(fd);
    ::close(listen_fd_);
  }
  std::string authority() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  int listen_fd_ = -1;
  std::uint16_t port_ = 0;
  std::vector<int> fillers_;
};

TEST(BadRequest, MalformedRequestLineGets400) {
  ScriptedUpstream up;
  ReboundProcess rb;
  auto r = raw_exchange(rb.port(), "THIS IS NOT HTTP\r\n\r\n");
  EXPECT_TRUE(IsReboundError(r, 400, {"bad_request"}));
  EXPECT_EQ(up.request_count(), 0u);
}

TEST(BadRequest, HeaderLineWithoutColonGets400) {
  ScriptedUpstream up;
  ReboundProcess rb;
  auto r = raw_exchange(rb.port(), "GET http://" + up.authority() + "/x HTTP/1.1\r\nHost: " + up.authority() +
                                       "\r\nthis line has no colon\r\n\r\n");
  EXPECT_TRUE(IsReboundError(r, 400, {"bad_request"}));
  EXPECT_EQ(up.request_count(), 0u);
}

TEST(BadRequest, MissingHostInOriginFormGets400) {
  ReboundProcess rb;
  auto r = raw_exchange(rb.port(), "GET /nohost HTTP/1.1\r\n\r\n");
  EXPECT_TRUE(IsReboundError(r, 400, {"bad_request"}));
}

TEST(BadRequest, ConnectPortOutOfRangeGets400) {
  ReboundProcess rb;
  auto r = raw_exchange(rb.port(), "CONNECT 127.0.0.1:99999 HTTP/1.1\r\nHost: 127.0.0.1:99999\r\n\r\n");
  EXPECT_TRUE(IsReboundError(r, 400, {"bad_request"})) << "port 99999 must not wrap to 34463";
}

TEST(UnknownHost, DenyAnswers403ForUnlistedHostAndForwardsListedOne) {
  ScriptedUpstream listed;
  ScriptedUpstream unlisted;
  ReboundOptions o;
  o.unknown_hosts = "deny";
  o.extra = "dependencies:\n  local:\n    hosts: [\"" + listed.authority() + "\"]\n";
  ReboundProcess rb(o);
  auto denied = raw_exchange(rb.port(), absolute_request("GET", unlisted.authority(), "/x"));
  EXPECT_TRUE(IsReboundError(denied, 403, {"unknown_host"}));
  EXPECT_EQ(unlisted.request_count(), 0u);
  EXPECT_EQ(unlisted.connections(), 0u);
  auto allowed = raw_exchange(rb.port(), absolute_request("GET", listed.authority(), "/x"));
  ASSERT_TRUE(allowed) << last_exchange_error();
  EXPECT_EQ(allowed->status, 200u);
  EXPECT_EQ(listed.request_count(), 1u);
}

TEST(UnknownHost, DenyAppliesToConnectToo) {
  TcpServer target(echo_handler());
  ReboundOptions o;
  o.unknown_hosts = "deny";
  o.extra = "dependencies:\n  local:\n    hosts: [\"backend.invalid\"]\n";
  ReboundProcess rb(o);
  auto r = raw_exchange(rb.port(),
                        "CONNECT " + target.authority() + " HTTP/1.1\r\nHost: " + target.authority() + "\r\n\r\n");
  EXPECT_TRUE(IsReboundError(r, 403, {"unknown_host"}));
  EXPECT_EQ(target.connections(), 0u);
}

TEST(UnknownHost, DenyMatchesListedHostsCaseInsensitively) {
  ReboundOptions o;
  o.unknown_hosts = "deny";
  o.extra = "dependencies:\n  named:\n    hosts: [\"Known.Invalid\"]\n";
  ReboundProcess rb(o);
  // Listed (case aside), so it is not refused; .invalid never resolves, so the attempt fails on DNS.
  auto r = raw_exchange(rb.port(), absolute_request("GET", "known.invalid", "/x"), 20s);
  EXPECT_TRUE(IsReboundError(r, 502, {"dns_failure"}));
  auto other = raw_exchange(rb.port(), absolute_request("GET", "other.invalid", "/x"), 20s);
  EXPECT_TRUE(IsReboundError(other, 403, {"unknown_host"}));
}

TEST(UpstreamError, ConnectionRefusedGets502ConnectRefused) {
  ReboundProcess rb;
  RefusingPort const dead;
  std::string authority = dead.authority();
  auto r = raw_exchange(rb.port(), absolute_request("GET", authority, "/x"), 20s);
  EXPECT_TRUE(IsReboundError(r, 502, {"connect_refused"}));
}

TEST(UpstreamError, ResetBeforeAnsweringGets502) {
  ScriptedUpstream up;
  Script s;
  s.reset = true;
  up.on("/reset", s);
  ReboundProcess rb;
  auto r = raw_exchange(rb.port(), absolute_request("GET", up.authority(), "/reset"), 20s);
  EXPECT_TRUE(IsReboundError(r, 502, {"connect_reset", "upstream_protocol_error"}));
  EXPECT_GE(up.request_count("/reset"), 1u);
}

TEST(UpstreamError, GarbageResponseGets502UpstreamProtocolError) {
  ScriptedUpstream up;
  Script s;
  s.raw_response = "THIS IS NOT AN HTTP RESPONSE\r\n\r\n";
  up.on("/garbage", s);
  ReboundProcess rb;
  auto r = raw_exchange(rb.port(), absolute_request("GET", up.authority(), "/garbage"), 20s);
  EXPECT_TRUE(IsReboundError(r, 502, {"upstream_protocol_error"}));
}

TEST(UpstreamError, UnresolvableHostGets502DnsFailure) {
  ReboundProcess rb;
  auto r = raw_exchange(rb.port(), absolute_request("GET", "nonexistent.invalid", "/x"), 20s);
  EXPECT_TRUE(IsReboundError(r, 502, {"dns_failure"}));
}

TEST(UpstreamError, SlowUpstreamGets504AttemptTimeout) {
  ScriptedUpstream up;
  Script s;
  s.delay = 30s;  // cut short when the upstream stops at the end of the test
  up.on("/slow", s);
  ReboundOptions o;
  o.attempt_timeout = "500ms";
  ReboundProcess rb(o);
  auto r = raw_exchange(rb.port(), absolute_request("GET", up.authority(), "/slow"), 25s);
  EXPECT_TRUE(IsReboundError(r, 504, {"attempt_timeout"}));
}

TEST(UpstreamError, ConnectPhaseTimeoutGets502ConnectTimeout) {
  BlackholeListener hole;
  ReboundOptions o;
  o.attempt_timeout = "500ms";
  ReboundProcess rb(o);
  auto r = raw_exchange(rb.port(), absolute_request("GET", hole.authority(), "/x"), 25s);
  EXPECT_TRUE(IsReboundError(r, 502, {"connect_timeout"}));
}

TEST(UpstreamError, ClientConnectionStaysUsableAfterA502) {
  ScriptedUpstream up;
  ReboundProcess rb;
  RefusingPort const dead;
  RawConnection c(rb.port());
  ASSERT_TRUE(c.send(absolute_request("GET", dead.authority(), "/refused")));
  auto r = c.read_response(20s);
  EXPECT_TRUE(IsReboundError(r, 502, {"connect_refused"}));
  ASSERT_TRUE(r);
  EXPECT_FALSE(iequals(r->header("Connection").value_or(""), "close"))
      << "a 502 to a complete request keeps the connection";
  ASSERT_TRUE(c.send(absolute_request("GET", up.authority(), "/after")));
  auto r2 = c.read_response();
  ASSERT_TRUE(r2) << c.last_error();
  EXPECT_EQ(r2->status, 200u);
}

}  // namespace
}  // namespace itest::errors_test
