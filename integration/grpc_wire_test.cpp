// gRPC calls through rebound against upstreams that misbehave on the HTTP/2 layer: a scripted
// hyper-h2 server (integration/h2_peer.py) refuses a stream, sends GOAWAY below one, resets
// streams, pushes back; and a real grpcio server behind TLS with ALPN h2 (grpc_peer.py
// server-tls). The client is always a real grpcio channel (grpc_peer.py call) with gRPC's own
// retries off, so every retry the upstream sees is rebound's.
#include "grpc_peers.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <map>

using namespace itest;
using namespace std::chrono_literals;

namespace grpc_wire_test {
namespace {

/// How many requests of `path` the h2 peer has seen (asked through rebound: the peer's
/// /peer.Svc/Seen answers it in its trailers).
std::string wire_seen(std::uint16_t rebound_port, const std::string& path) {
  auto r = grpc_call(rebound_port, "peer.test", "/peer.Svc/Seen", {"--meta", "x-of=" + path});
  if (r.code != 0) return "(Seen failed: " + r.raw + ")";
  return r.trailing["x-seen"];
}

/// A dependency `name` (host `host`) whose origin is `origin`; short backoff, so any wait
/// that is longer is one the upstream asked for.
std::string wire_dependency(const std::string& name, const std::string& host, const std::string& origin,
                            const std::string& more = "") {
  return "  " + name + ":\n    hosts: [" + host + "]\n    origin: " + origin +
         "\n    context: grpc\n    backoff: {base: 1ms, cap: 2ms}\n" + more;
}

ReboundOptions wire_options(const std::string& dependencies) {
  ReboundOptions o;
  o.extra = "dependencies:\n" + dependencies;
  return o;
}

ReboundOptions h2_peer_options(H2Peer& peer, const std::string& more = "") {
  return wire_options(
      wire_dependency("peer", "peer.test", "http://127.0.0.1:" + std::to_string(peer.port()), more));
}

}  // namespace

// RFC 9113 8.7: a stream refused with REFUSED_STREAM was never processed; rebound sends it again.
TEST(GrpcWire, RefusedStreamIsRetriedAndSucceeds) {
  H2Peer peer;
  ReboundProcess rebound(h2_peer_options(peer));
  auto r = grpc_call(rebound.port(), "peer.test", "/peer.Svc/RefuseOnce");
  ASSERT_EQ(r.code, 0) << r.raw << "\nrebound: " << rebound.stdout_text();
  EXPECT_EQ(r.body, "ok");
  EXPECT_EQ(r.trailing["x-seen"], "2") << "refused once, answered on the retry";
}

// RFC 9113 6.8: a stream above a GOAWAY's last-stream-id was never processed; the connection
// is closed, and the retry goes on a new one.
TEST(GrpcWire, StreamAboveGoawayIsRetriedOnANewConnection) {
  H2Peer peer;
  ReboundProcess rebound(h2_peer_options(peer));
  auto r = grpc_call(rebound.port(), "peer.test", "/peer.Svc/GoawayOnce");
  ASSERT_EQ(r.code, 0) << r.raw << "\nrebound: " << rebound.stdout_text();
  EXPECT_EQ(r.trailing["x-seen"], "2");
  // The pool left the closed connection behind: the next call works too.
  auto again = grpc_call(rebound.port(), "peer.test", "/peer.Svc/Echo", {"--payload", "after-goaway"});
  EXPECT_EQ(again.code, 0) << again.raw;
  EXPECT_EQ(again.body, "after-goaway");
}

// grpc-retry-pushback-ms is a wait of at least that long, far above the 1-2 ms backoff.
TEST(GrpcWire, R5_PushbackIsWaitedBeforeTheRetry) {
  H2Peer peer;
  ReboundProcess rebound(h2_peer_options(peer));
  auto r = grpc_call(rebound.port(), "peer.test", "/peer.Svc/Pushback", {"--meta", "x-pushback=300"});
  ASSERT_EQ(r.code, 0) << r.raw << "\nrebound: " << rebound.stdout_text();
  EXPECT_EQ(r.trailing["x-seen"], "2");
  ASSERT_FALSE(r.trailing["x-gap-ms"].empty()) << r.raw;
  EXPECT_GE(std::stoi(r.trailing["x-gap-ms"]), 300) << "the retry came before the pushback ran out";
}

// R-5 (gRPC A6): a negative pushback means "do not retry".
TEST(GrpcWire, R5_MalformedPushbackIsNotRetried) {
  H2Peer peer;
  ReboundProcess rebound(h2_peer_options(peer));
  auto r = grpc_call(rebound.port(), "peer.test", "/peer.Svc/Pushback", {"--meta", "x-pushback=-1"});
  EXPECT_EQ(r.code, 14) << r.raw;
  EXPECT_EQ(r.details, "pushed back") << "the server's own answer reaches the client";
  EXPECT_EQ(r.trailing["grpc-retry-pushback-ms"], "-1") << "a well-formed one goes on as sent: " << r.raw;
  EXPECT_TRUE(rebound.wait_for_log("pushback_refused")) << rebound.stdout_text();
  EXPECT_EQ(wire_seen(rebound.port(), "/peer.Svc/Pushback"), "1") << "no retry was sent";
}

// Issue 29, defect 13: a malformed pushback went on to the client unchanged, for its library
// to parse its own way. A6 reads it as "do not retry", as rebound did: the client gets -1.
TEST(GrpcWire, R5_AMalformedPushbackReachesTheClientAsMinusOne) {
  H2Peer peer;
  ReboundProcess rebound(h2_peer_options(peer));
  auto r = grpc_call(rebound.port(), "peer.test", "/peer.Svc/Pushback", {"--meta", "x-pushback=soon"});
  EXPECT_EQ(r.code, 14) << r.raw;
  EXPECT_EQ(r.trailing["grpc-retry-pushback-ms"], "-1") << r.raw;
  EXPECT_EQ(wire_seen(rebound.port(), "/peer.Svc/Pushback"), "1") << "no retry was sent";
}

// a pushback that runs past the deadline ends the call at once, with the server's answer.
TEST(GrpcWire, R5_PushbackBeyondTheDeadlineFailsAtOnce) {
  H2Peer peer;
  ReboundProcess rebound(h2_peer_options(peer, "    total_timeout: 2s\n"));
  auto r = grpc_call(rebound.port(), "peer.test", "/peer.Svc/Pushback", {"--meta", "x-pushback=60000"});
  EXPECT_EQ(r.code, 14) << r.raw;
  EXPECT_EQ(r.details, "pushed back") << "the server's own answer, returned at once";
  EXPECT_TRUE(rebound.wait_for_log("\"reason\":\"retry_after_exceeds_deadline\"")) << rebound.stdout_text();
  EXPECT_EQ(wire_seen(rebound.port(), "/peer.Svc/Pushback"), "1");
}

// A stream reset with INTERNAL_ERROR may have been processed (connect_reset, retryable with a
// key): max_retries 2 is three attempts, then UNAVAILABLE naming the error type.
TEST(GrpcWire, ResetStreamsAreRetriedUpToMaxRetries) {
  H2Peer peer;
  ReboundProcess rebound(h2_peer_options(peer, "    max_retries: 2\n"));
  auto r = grpc_call(rebound.port(), "peer.test", "/peer.Svc/Reset");
  EXPECT_EQ(r.code, 14) << r.raw;
  EXPECT_EQ(r.trailing["rebound-error"], "connect_reset") << r.raw;
  EXPECT_EQ(wire_seen(rebound.port(), "/peer.Svc/Reset"), "3");
}

// An https origin: TLS with ALPN h2 to a real grpcio server, verified against the
// dependency's ca_file; a second dependency on the same origin that trusts another CA must
// fail with tls_certificate, never retried, even after the first one's call left a verified
// connection to that origin in the pool. One worker, so both calls share one pool.
TEST(GrpcWire, TlsOriginWithAlpnH2) {
  TestPki pki;
  TestPki other;
  auto const cert = pki.issue("server", {"127.0.0.1"});
  TlsGrpcServer server(cert);
  auto const origin = "https://127.0.0.1:" + std::to_string(server.port());
  auto o = wire_options(
      wire_dependency("good", "good.test", origin, "    tls: {ca_file: " + pki.ca_file() + "}\n") +
      wire_dependency("wrongca", "wrongca.test", origin,
                      "    tls: {ca_file: " + other.ca_file() + "}\n    max_retries: 2\n"));
  o.workers = 1;
  ReboundProcess rebound(o);
  auto ok = grpc_call(rebound.port(), "good.test", "/test.Peer/Echo",
                      {"--meta", "x-call-id=tls1", "--payload", "over-tls"});
  ASSERT_EQ(ok.code, 0) << ok.raw << "\nrebound: " << rebound.stdout_text() << "\nserver: " << server.stderr_text();
  EXPECT_EQ(ok.body, "over-tls");
  EXPECT_EQ(ok.trailing["x-attempt"], "1");

  auto bad = grpc_call(rebound.port(), "wrongca.test", "/test.Peer/Echo", {"--meta", "x-call-id=tls2"});
  EXPECT_EQ(bad.code, 14) << "a connection verified for `good` was reused for `wrongca`: " << bad.raw;
  EXPECT_EQ(bad.trailing["rebound-error"], "tls_certificate") << bad.raw;
  EXPECT_FALSE(rebound.wait_for_log("\"retry_attempt\"", 500ms)) << "a TLS verification failure is final";
}

// The same failure with nothing pooled: a certificate from a CA the dependency does not trust
// is tls_certificate at once, with no retry (TLS errors are final, R-4/R-9).
TEST(GrpcWire, TlsCertificateFromAnUntrustedCaIsFinal) {
  TestPki pki;
  TestPki other;
  auto const cert = pki.issue("server", {"127.0.0.1"});
  TlsGrpcServer server(cert);
  auto const origin = "https://127.0.0.1:" + std::to_string(server.port());
  ReboundProcess rebound(wire_options(wire_dependency(
      "wrongca", "wrongca.test", origin, "    tls: {ca_file: " + other.ca_file() + "}\n    max_retries: 2\n")));
  auto bad = grpc_call(rebound.port(), "wrongca.test", "/test.Peer/Echo", {"--meta", "x-call-id=tls3"});
  EXPECT_EQ(bad.code, 14) << bad.raw;
  EXPECT_EQ(bad.trailing["rebound-error"], "tls_certificate") << bad.raw;
  EXPECT_TRUE(rebound.wait_for_log("tls_certificate")) << rebound.stdout_text();
  EXPECT_FALSE(rebound.wait_for_log("\"retry_attempt\"", 500ms)) << "a TLS verification failure is final";
}

// the server is told the time the call has left, read from the raw header the scripted
// upstream received. The call is made with nghttp (nghttp2-client), which sends exactly the
// grpc-timeout it is given (a grpcio client derives its own from a wall-clock deadline, a few
// milliseconds either way); rebound never passes on more than it got, and sends the attempt
// timeout when the caller gave none.
TEST(GrpcWire, R3_EachAttemptCarriesTheTimeLeftAsItsGrpcTimeout) {
  H2Peer peer;
  ReboundProcess rebound(h2_peer_options(peer, "    attempt_timeout: 8s\n"));
  auto const dir = make_temp_dir();
  write_file(dir + "/message", std::string("\0\0\0\0\5hello", 10));
  auto sent_on = [&](std::vector<std::string> extra) {
    std::vector<std::string> argv{"/usr/bin/nghttp", "-v", "-H", ":authority: peer.test", "-H",
                                  "content-type: application/grpc", "-H", "te: trailers", "-d", dir + "/message"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.push_back("http://127.0.0.1:" + std::to_string(rebound.port()) + "/peer.Svc/Echo");
    auto out = run_process(argv, {}, 20s).out;
    auto const at = out.find("x-grpc-timeout: ");
    if (at == std::string::npos) return -1L;
    return std::stol(out.substr(at + 16));  // "4999m": stol stops at the unit
  };
  auto const left = sent_on({"-H", "grpc-timeout: 5000m"});
  EXPECT_GT(left, 3000);
  EXPECT_LE(left, 5000);
  auto const attempt = sent_on({});
  EXPECT_GT(attempt, 6000);
  EXPECT_LE(attempt, 8000);
  remove_tree(dir);
}

}  // namespace grpc_wire_test
