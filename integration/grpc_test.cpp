// gRPC unary calls through rebound (issue 21): real gRPC peers from Debian's python3-grpcio
// (integration/grpc_peer.py), a channel that targets rebound's listener directly over h2c,
// and the upstream reached over HTTP/2. gRPC's own retries are off in the client, so every
// retry the server sees is rebound's.
#include "client.hpp"
#include "dns_server.hpp"
#include "grpc_peers.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

using namespace itest;
using namespace std::chrono_literals;

namespace grpc_test {
namespace {

/// A call through rebound to the dependency `peer` (authority peer.test).
CallResult call(std::uint16_t rebound_port, const std::string& method, std::vector<std::string> args = {}) {
  return grpc_call(rebound_port, "peer.test", method, args);
}

/// A dependency `peer` whose calls go to the gRPC server: the channel names it by authority.
std::string dependency(std::uint16_t upstream_port, const std::string& more = "") {
  return "dependencies:\n"
         "  peer:\n"
         "    hosts: [peer.test]\n"
         "    origin: http://127.0.0.1:" +
         std::to_string(upstream_port) +
         "\n"
         "    context: grpc\n"
         "    backoff: {base: 10ms, cap: 50ms}\n" +
         more;
}

ReboundOptions with(const std::string& extra) {
  ReboundOptions o;
  o.extra = extra;
  return o;
}

}  // namespace

TEST(Grpc, UnaryCallThroughReboundReachesTheServerAndBack) {
  GrpcServer server;
  ReboundProcess rebound(with(dependency(server.port())));
  auto r = call(rebound.port(), "/test.Peer/Echo", {"--payload", "ping-123"});
  ASSERT_EQ(r.code, 0) << r.raw;
  EXPECT_EQ(r.body, "ping-123");
  EXPECT_EQ(r.trailing["x-attempt"], "1");
}

// R-4: UNAVAILABLE is retried; the call succeeds on the third attempt, one key throughout (R-6).
TEST(Grpc, R4_UnavailableIsRetriedWithOneIdempotencyKey) {
  GrpcServer server;
  ReboundProcess rebound(with(dependency(server.port())));
  auto r = call(rebound.port(), "/test.Peer/Fail",
                {"--meta", "x-call-id=u1", "--meta", "x-fail-times=2", "--meta", "x-fail-code=14"});
  ASSERT_EQ(r.code, 0) << r.raw;
  EXPECT_EQ(r.trailing["x-attempt"], "3");
  EXPECT_EQ(r.trailing["x-idempotency-key"].size(), 36u) << "rebound injects a UUIDv4 key as metadata";
  EXPECT_EQ(r.trailing["x-previous-attempts"], "2") << "gRPC A6: each retry says how many went before";
  EXPECT_EQ(r.initial["rebound-attempts"], "3") << "SPEC 4: the answer says how many attempts it took";
}

// R-4's other retryable rows: DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, ABORTED.
TEST(Grpc, R4_EveryRetryableGrpcStatusIsRetried) {
  GrpcServer server;
  ReboundProcess rebound(with(dependency(server.port())));
  for (int code : {4, 8, 10}) {
    auto const id = "r" + std::to_string(code);
    auto r = call(
        rebound.port(), "/test.Peer/Fail",
        {"--meta", "x-call-id=" + id, "--meta", "x-fail-times=1", "--meta", "x-fail-code=" + std::to_string(code)});
    ASSERT_EQ(r.code, 0) << code << ": " << r.raw;
    EXPECT_EQ(r.trailing["x-attempt"], "2") << code;
  }
}

// R-4's final column reaches the client after one attempt, with the server's own message.
TEST(Grpc, R4_NonRetryableGrpcStatusIsReturnedAtOnce) {
  GrpcServer server;
  ReboundProcess rebound(with(dependency(server.port())));
  for (int code : {3, 5, 7, 16, 12}) {
    auto const id = "f" + std::to_string(code);
    auto r = call(
        rebound.port(), "/test.Peer/Fail",
        {"--meta", "x-call-id=" + id, "--meta", "x-fail-times=1", "--meta", "x-fail-code=" + std::to_string(code)});
    EXPECT_EQ(r.code, code) << r.raw;
    EXPECT_EQ(r.details, "scripted failure 1") << code;
    EXPECT_EQ(r.trailing["x-attempt"], "1") << code;
  }
}

// R-2: max_retries 2 means three attempts, then the last answer goes to the client.
TEST(Grpc, R2_RetriesStopAtMaxRetries) {
  GrpcServer server;
  ReboundProcess rebound(with(dependency(server.port(), "    max_retries: 2\n")));
  auto r = call(rebound.port(), "/test.Peer/Fail", {"--meta", "x-call-id=x1", "--meta", "x-fail-code=14"});
  EXPECT_EQ(r.code, 14) << r.raw;
  EXPECT_EQ(r.trailing["x-attempt"], "3");
  EXPECT_TRUE(rebound.wait_for_log("\"grpc_status\":14")) << "attempt logs name the gRPC status";
  EXPECT_TRUE(rebound.wait_for_log("\"grpc_method\":\"/test.Peer/Fail\""));
}

// R-3: the caller's grpc-timeout is the call's deadline (what the server is told is checked
// exactly in GrpcWire.R3_EachAttemptCarriesTheTimeLeftAsItsGrpcTimeout).
TEST(Grpc, R3_GrpcTimeoutIsTheDeadline) {
  GrpcServer server;
  ReboundProcess rebound(with(dependency(server.port())));
  auto r = call(rebound.port(), "/test.Peer/Echo", {"--timeout", "5"});
  ASSERT_EQ(r.code, 0) << r.raw;
  EXPECT_FALSE(r.trailing["x-time-left-ms"].empty()) << "the server had a deadline: " << r.raw;
  auto slow = call(rebound.port(), "/test.Peer/Slow", {"--meta", "x-sleep-ms=2000", "--timeout", "0.5"});
  EXPECT_EQ(slow.code, 4) << slow.raw;  // DEADLINE_EXCEEDED
}

// rebound's own failure (nothing listens) is a gRPC status the client acts on, not an HTTP error.
TEST(Grpc, ConnectFailureIsUnavailableWithTheErrorType) {
  RefusingPort dead;
  ReboundProcess rebound(with(dependency(dead.port(), "    max_retries: 1\n")));
  auto r = call(rebound.port(), "/test.Peer/Echo", {});
  EXPECT_EQ(r.code, 14) << r.raw;
  // A trailers-only answer: gRPC clients read its head as the trailers.
  EXPECT_EQ(r.trailing["rebound-error"], "connect_refused") << r.raw;
  EXPECT_EQ(r.trailing["rebound-attempts"], "2") << r.raw;
}

// A call is located and planned once, at its head. One refused there (here an unknown host
// under `unknown_hosts: deny`) is answered at once: a client that keeps its stream open gets
// PERMISSION_DENIED, not the deadline it would reach waiting for the body's end.
TEST(Grpc, ACallRefusedAtItsHeadIsAnsweredWhileItsStreamIsStillOpen) {
  GrpcServer server;
  ReboundOptions o = with(dependency(server.port()));
  o.unknown_hosts = "deny";
  ReboundProcess rebound(o);
  auto r = grpc_call(rebound.port(), "other.test", "/test.Peer/Collect", {"--kind", "open-stream", "--timeout", "20"});
  EXPECT_EQ(r.code, 7) << r.raw;
  EXPECT_EQ(r.trailing["rebound-error"], "unknown_host") << r.raw;
}

// Issue 29, defect 13: a message over limits.max_request_body (or metadata over
// max_request_head) got a bare HTTP 413/431, which grpcio reports as UNKNOWN with no reason.
// It is RESOURCE_EXHAUSTED with rebound-error, and nothing reaches the server.
TEST(Grpc, AnOversizedMessageIsResourceExhaustedWithTheErrorType) {
  GrpcServer server;
  ReboundOptions o = with(dependency(server.port()));
  o.max_request_body = "1KiB";
  o.max_request_head = "4KiB";
  ReboundProcess rebound(o);
  auto big = call(rebound.port(), "/test.Peer/Echo", {"--payload", std::string(4096, 'm')});
  EXPECT_EQ(big.code, 8) << big.raw;
  EXPECT_EQ(big.trailing["rebound-error"], "bad_request") << big.raw;
  EXPECT_NE(big.details.find("limits.max_request_body"), std::string::npos) << big.raw;
  auto heavy = call(rebound.port(), "/test.Peer/Echo", {"--meta", "x-big=" + std::string(6000, 'h')});
  EXPECT_EQ(heavy.code, 8) << heavy.raw;
  EXPECT_NE(heavy.details.find("limits.max_request_head"), std::string::npos) << heavy.raw;
  auto fine = call(rebound.port(), "/test.Peer/Echo", {"--payload", "small"});
  EXPECT_EQ(fine.code, 0) << "the connection and the dependency are fine: " << fine.raw;
  EXPECT_EQ(fine.trailing["x-attempt"], "1") << "the refused calls never reached the server";
}

// HTTP/1.1 clients on the same listener are unaffected by the HTTP/2 preface check.
TEST(Grpc, Http1RequestsOnTheSameListenerStillWork) {
  GrpcServer server;
  ReboundProcess rebound(with(dependency(server.port())));
  auto r = call(rebound.port(), "/test.Peer/Echo", {});
  ASSERT_EQ(r.code, 0) << r.raw;
  // "P" alone could begin the preface: rebound waits for the next byte before it decides.
  auto conn = RawConnection::try_connect(rebound.port());
  ASSERT_TRUE(conn);
  auto const self = "127.0.0.1:" + std::to_string(rebound.port());
  ASSERT_TRUE(conn->send("P"));
  std::this_thread::sleep_for(50ms);
  ASSERT_TRUE(conn->send("UT http://" + self + "/ HTTP/1.1\r\nHost: " + self + "\r\nContent-Length: 0\r\n\r\n"));
  auto resp = conn->read_response(5s);
  ASSERT_TRUE(resp);
  EXPECT_EQ(resp->status, 508u) << "parsed as HTTP/1.1: a request for rebound itself is a loop";
}

namespace {

/// The frame types in `bytes`, read as a sequence of HTTP/2 frames (9-byte header each).
std::vector<int> frame_types(std::string_view bytes) {
  std::vector<int> out;
  while (bytes.size() >= 9) {
    auto const len = (std::size_t(std::uint8_t(bytes[0])) << 16) | (std::size_t(std::uint8_t(bytes[1])) << 8) |
                     std::size_t(std::uint8_t(bytes[2]));
    out.push_back(std::uint8_t(bytes[3]));
    if (bytes.size() < 9 + len) break;
    bytes.remove_prefix(9 + len);
  }
  return out;
}

}  // namespace

// Hostile input on the HTTP/2 side: a preface followed by bytes that are no HTTP/2 frame gets
// a GOAWAY and a close, and the process goes on serving calls.
TEST(Grpc, GarbageAfterThePrefaceGetsGoawayAndClose) {
  GrpcServer server;
  ReboundProcess rebound(with(dependency(server.port())));
  auto conn = RawConnection::try_connect(rebound.port());
  ASSERT_TRUE(conn);
  ASSERT_TRUE(conn->send(std::string("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n") + std::string(64, '\xff')));
  bool closed = false;
  auto const bytes = conn->read_until_eof(5s, &closed);
  EXPECT_TRUE(closed) << "the connection is closed, not left hanging";
  auto const types = frame_types(bytes);
  EXPECT_NE(std::find(types.begin(), types.end(), 7), types.end()) << "a GOAWAY (type 7) says why";
  auto r = call(rebound.port(), "/test.Peer/Echo", {});
  EXPECT_EQ(r.code, 0) << r.raw;
}

// A client that sends the preface and then nothing is closed after limits.idle_timeout.
TEST(Grpc, SilentHttp2ConnectionIsClosedWhenIdle) {
  ReboundOptions o;
  o.idle_timeout = "1s";
  ReboundProcess rebound(o);
  auto conn = RawConnection::try_connect(rebound.port());
  ASSERT_TRUE(conn);
  ASSERT_TRUE(conn->send("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"));
  EXPECT_TRUE(conn->wait_closed(5s));
}

// R-9: rebound's credential for the dependency goes as `authorization` metadata on every
// attempt; R-10: the attempts are counted under the dependency like any other.
TEST(Grpc, R9_DependencyCredentialTravelsAsMetadataAndAttemptsAreCounted) {
  GrpcServer server;
  auto const dir = make_temp_dir();
  write_file(dir + "/token", "grpc-token-1\n");
  ReboundProcess rebound(with(dependency(server.port(), "    auth: {type: bearer_file, path: " + dir + "/token}\n")));
  auto r = call(rebound.port(), "/test.Peer/Fail",
                {"--meta", "x-call-id=a1", "--meta", "x-fail-times=1", "--meta", "x-fail-code=14"});
  ASSERT_EQ(r.code, 0) << r.raw;
  EXPECT_EQ(r.trailing["x-authorization"], "Bearer grpc-token-1");
  auto metrics = RawConnection::try_connect(rebound.admin_port());
  ASSERT_TRUE(metrics);
  ASSERT_TRUE(metrics->send("GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"));
  auto m = metrics->read_response(5s);
  ASSERT_TRUE(m);
  EXPECT_NE(m->body.find("retry_attempts_total{attempt_number=\"2\",dependency=\"peer\""), std::string::npos)
      << m->body.substr(0, 3000);
  remove_tree(dir);
}

// Issue 22 over gRPC: of two rebound hops only the bottom one retries a failing call, so the
// server sees 1 + max_retries attempts, not (1 + max_retries)^2; retry_layered restores that.
TEST(Grpc, Layers_OnlyTheBottomReboundRetriesAFailingCall) {
  GrpcServer server;
  // A budget and breaker that stay out of the way: what is counted is the retries alone.
  std::string const quiet = "    budget: {min_retries: 100000}\n    circuit_breaker: {mode: 'off'}\n";
  ReboundProcess bottom(with(dependency(server.port(), quiet)));
  ReboundProcess top(with(dependency(bottom.port(), quiet)));
  auto r = call(top.port(), "/test.Peer/Fail", {"--meta", "x-call-id=l1", "--meta", "x-fail-code=14"});
  EXPECT_EQ(r.code, 14) << r.raw;
  EXPECT_EQ(r.trailing["x-attempt"], "4") << "grpc context: 3 retries at the bottom, none above: " << r.raw;
  EXPECT_EQ(r.trailing["rebound-retried"], "exhausted") << r.raw;
  EXPECT_EQ(r.trailing["rebound-attempts"], "1") << "the top hop's own count replaces the bottom's";

  ReboundProcess layered(with(dependency(bottom.port(), quiet + "    retry_layered: true\n")));
  auto m = call(layered.port(), "/test.Peer/Fail", {"--meta", "x-call-id=l2", "--meta", "x-fail-code=14"});
  EXPECT_EQ(m.code, 14) << m.raw;
  EXPECT_EQ(m.trailing["x-attempt"], "16") << "retry_layered: true multiplies, as before: " << m.raw;
}

// Issue 22 over gRPC: a rebound whose breaker is open says so (rebound-overloaded), and the
// rebound above backs off instead of retrying the refusal.
TEST(Grpc, Layers_OverloadedBelowIsNotRetried) {
  GrpcServer server;
  ReboundProcess bottom(with(dependency(server.port(),
                                        "    max_retries: 1\n    circuit_breaker: {mode: enforce, min_requests: 2, "
                                        "failure_ratio: 0.5, open_for: 60s}\n")));
  for (auto const* id : {"o1", "o2"})
    call(bottom.port(), "/test.Peer/Fail", {"--meta", std::string("x-call-id=") + id});
  ReboundProcess top(with(dependency(bottom.port(), "    budget: {min_retries: 100000}\n")));
  auto r = call(top.port(), "/test.Peer/Fail", {"--meta", "x-call-id=o3"});
  EXPECT_EQ(r.code, 14) << r.raw;
  EXPECT_EQ(r.trailing["rebound-error"], "circuit_open") << r.raw;
  EXPECT_EQ(r.trailing["rebound-attempts"], "1") << "the top hop tried once and backed off: " << r.raw;
  EXPECT_TRUE(top.wait_for_log("\"reason\":\"overloaded\"")) << "the stop is logged with its reason";
}

// Issue 29, defect 1: calls their own client cancels (RST_STREAM CANCEL) are nobody's
// failure. Before, each came back from the exchange as an attempt timeout: counted by the
// breaker, a retry charged to the budget for nobody, and with the budget dry the breaker
// opened on `budget_exhausted` for every caller of the dependency.
TEST(Grpc, ClientCancellationsNeitherRetryNorOpenTheBreaker) {
  GrpcServer server;
  ReboundProcess rebound(with(dependency(server.port())));
  auto cancelled =
      call(rebound.port(), "/test.Peer/Slow", {"--meta", "x-sleep-ms=3000", "--cancel-after", "0.15", "--calls", "20"});
  ASSERT_EQ(cancelled.code, 1) << cancelled.raw;  // CANCELLED, by the client
  EXPECT_TRUE(rebound.wait_for_log("the client cancelled the request")) << rebound.stdout_text();

  auto after = call(rebound.port(), "/test.Peer/Echo", {"--payload", "still-open"});
  EXPECT_EQ(after.code, 0) << "the breaker stays closed for every other caller: " << after.raw;
  EXPECT_EQ(after.body, "still-open");
  HttpClient admin(rebound.admin_port());
  auto const deps = admin.get("/dependencies").body;
  EXPECT_NE(deps.find("\"retries_in_window\":0,"), std::string::npos) << "no retry was charged: " << deps;
  EXPECT_NE(deps.find("\"state\":\"closed\""), std::string::npos) << deps;
  auto const log = rebound.stdout_text();
  EXPECT_EQ(log.find("\"retry_attempt\""), std::string::npos) << "no retry scheduled for a caller who left";
  EXPECT_EQ(log.find("\"circuit_breaker_changed\""), std::string::npos);
}

namespace {

/// Established TCP connections to 127.0.0.1:`port` on this machine (/proc/net/tcp).
std::size_t connections_to(std::uint16_t port) {
  std::ifstream in("/proc/net/tcp");
  std::string line;
  std::getline(in, line);  // the column names
  char want[8];
  std::snprintf(want, sizeof want, ":%04X", port);
  std::size_t n = 0;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote, state;
    fields >> slot >> local >> remote >> state;
    if (state == "01" && remote.size() >= 5 && remote.substr(remote.size() - 5) == want) ++n;
  }
  return n;
}

}  // namespace

// Issue 29, defect 8: a burst of calls that arrives while the first connect to the upstream is
// under way waits for it. Before, each call opened a connection of its own (100 for 100).
TEST(Grpc, ABurstBeforeTheFirstConnectSharesOneUpstreamConnection) {
  GrpcServer server;
  ReboundProcess rebound(with(dependency(server.port())));
  auto r = call(rebound.port(), "/test.Peer/Echo", {"--concurrent", "100"});
  ASSERT_EQ(r.code, 0) << r.raw;
  EXPECT_LE(connections_to(server.port()), 2u)
      << "one per worker at most; docs/grpc.md promises one per dependency and worker";
}

// R-10: a gRPC call's correlation id follows the rule every way in follows (X-Request-ID,
// then X-Correlation-ID, then traceparent); gRPC read only x-request-id before.
// Issue 50 for gRPC: a retry leaves the connection to the address that failed for one to the
// name's other address, and an address that keeps failing is ejected for every call.
TEST(Grpc, ARetryGoesToTheNamesOtherAddressAndAFailingOneIsEjected) {
  DnsServer dns;
  GrpcServer down("127.0.0.2:0", true);
  auto const port = std::to_string(down.port());
  GrpcServer healthy("127.0.0.3:" + port, false);
  healthy.port();
  dns.set("svc.test", {{"127.0.0.2", "127.0.0.3"}, 60});
  ReboundProcess rebound(with("dns:\n  servers: [\"" + dns.address() +
                              "\"]\n"
                              "dependencies:\n"
                              "  peer:\n"
                              "    hosts: [peer.test]\n"
                              "    origin: http://svc.test:" +
                              port +
                              "\n"
                              "    context: grpc\n"
                              "    backoff: {base: 10ms, cap: 50ms}\n"));
  for (int i = 0; i < 5; ++i) {  // each fails once at 127.0.0.2, then succeeds at 127.0.0.3
    auto r = call(rebound.port(), "/test.Peer/Echo", {"--payload", "hi"});
    ASSERT_EQ(r.code, 0) << r.raw;
    EXPECT_EQ(r.body, "hi");
    EXPECT_EQ(r.initial["rebound-attempts"], "2") << r.raw;
  }
  EXPECT_TRUE(rebound.wait_for_log(R"("address_ejected","dependency":"peer","address":"127.0.0.2")"));
  auto r = call(rebound.port(), "/test.Peer/Echo", {"--payload", "hi"});
  ASSERT_EQ(r.code, 0) << r.raw;
  EXPECT_EQ(r.initial["rebound-attempts"], "1") << r.raw;  // straight to the address not ejected
}

TEST(Grpc, R10_CorrelationIdFollowsTheSameRuleAsHttp) {
  GrpcServer server;
  ReboundProcess rebound(with(dependency(server.port())));
  auto r = call(rebound.port(), "/test.Peer/Fail",
                {"--meta", "x-call-id=c1", "--meta", "x-fail-times=1", "--meta", "x-fail-code=14", "--meta",
                 "x-correlation-id=grpc-corr-9"});
  ASSERT_EQ(r.code, 0) << r.raw;
  ASSERT_TRUE(rebound.wait_for_log("\"retry_attempt\""));
  auto const log = rebound.stdout_text();
  auto const at = log.find("\"retry_attempt\"");
  auto const line = log.substr(log.rfind('\n', at) + 1, log.find('\n', at) - log.rfind('\n', at) - 1);
  EXPECT_NE(line.find("\"correlation_id\":\"grpc-corr-9\""), std::string::npos) << line;
}

}  // namespace grpc_test
