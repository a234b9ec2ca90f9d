// TLS origination (SPEC 5, R-9) through the real binary: the application calls http://,
// the dependency's `origin: https://...` makes rebound the TLS client. Certificates come from
// a throw-away CA (test_pki.hpp); the upstream is the scripted server speaking TLS.
#include "helpers.hpp"
#include "test_pki.hpp"

namespace itest::tls_test {
namespace {

using namespace std::chrono_literals;

/// A dependency `pay` (Host pay.internal) whose origin is the TLS upstream on 127.0.0.1.
std::string pay_dependency(std::uint16_t port, const std::string& tls, const std::string& policy = {}) {
  return "dependencies:\n  pay:\n    hosts: [pay.internal]\n    origin: https://127.0.0.1:" + std::to_string(port) +
         "\n    tls:\n" + tls + "    backoff: {base: 1ms, cap: 2ms}\n" + policy;
}

std::string trust(const TestPki& pki, const std::string& name = "localhost") {
  return "      ca_file: " + pki.ca_file() + "\n      server_name: " + name + "\n";
}

TEST(Tls, R9_VerifiedOriginationWorksAndRetries) {
  TestPki pki;
  auto const cert = pki.issue("server", {"localhost"});
  ScriptedUpstream up;
  up.use_tls(cert.cert_file, cert.key_file);
  up.on_sequence("/pay", {respond(503), respond(200)});
  ReboundOptions o;
  o.extra = pay_dependency(up.port(), trust(pki), "    max_retries: 2\n");
  ReboundProcess rb(o);

  auto r = raw_exchange(rb.port(), absolute_request("GET", "pay.internal", "/pay?x=1"));
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->status, 200u);
  EXPECT_EQ(r->header("Rebound-Attempts").value_or(""), "2");
  ASSERT_EQ(up.request_count("/pay"), 2u);
  EXPECT_EQ(up.requests()[0].header("Host").value_or(""), "pay.internal") << "the client's Host is kept";
  EXPECT_EQ(up.requests()[0].target, "/pay?x=1");
  EXPECT_EQ(up.last_sni(), "localhost") << "SNI is tls.server_name";
  EXPECT_GE(up.tls_handshakes(), 1u);
}

TEST(Tls, ABodyThatRunsToTheCloseEndsWithoutCloseNotify) {
  // Many TLS servers close without close_notify; HTTP framing says whether the body was whole.
  TestPki pki;
  auto const cert = pki.issue("server", {"localhost"});
  ScriptedUpstream up;
  up.use_tls(cert.cert_file, cert.key_file);
  Script to_close;
  to_close.raw_response = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nall of it";
  up.on("/stream", to_close);
  Script cut;
  cut.raw_response = "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nnot all";
  up.on("/cut", cut);
  ReboundOptions o;
  o.extra = pay_dependency(up.port(), trust(pki));
  ReboundProcess rb(o);
  auto r = raw_exchange(rb.port(), absolute_request("GET", "pay.internal", "/stream"));
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->status, 200u);
  EXPECT_EQ(r->body, "all of it");
  EXPECT_FALSE(raw_exchange(rb.port(), absolute_request("GET", "pay.internal", "/cut")))
      << "a Content-Length body cut short is not passed off as complete";
  EXPECT_TRUE(rb.wait_for_log("response body cut short"));
}

TEST(Tls, R9_IpOriginIsVerifiedAgainstTheCertificatesIpAddress) {
  TestPki pki;
  auto const cert = pki.issue("server", {"127.0.0.1"});
  ScriptedUpstream up;
  up.use_tls(cert.cert_file, cert.key_file);
  up.on("/x", respond(200));
  ReboundOptions o;
  o.extra = pay_dependency(up.port(), "      ca_file: " + pki.ca_file() + "\n");
  ReboundProcess rb(o);
  auto r = raw_exchange(rb.port(), absolute_request("GET", "pay.internal", "/x"));
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->status, 200u);
  EXPECT_EQ(up.last_sni(), "") << "no SNI for an IP literal (RFC 6066)";
}

TEST(Tls, PooledConnectionsAreReusedAndNewOnesResumeTheSession) {
  TestPki pki;
  auto const cert = pki.issue("server", {"localhost"});
  ScriptedUpstream up;
  up.use_tls(cert.cert_file, cert.key_file);
  up.on("/keep", respond(200));
  Script closing = respond(200);
  closing.close_after = true;
  up.on("/close", closing);
  ReboundOptions o;
  o.workers = 1;
  o.extra = pay_dependency(up.port(), trust(pki));
  ReboundProcess rb(o);

  for (int i = 0; i < 3; ++i) {
    auto r = raw_exchange(rb.port(), absolute_request("GET", "pay.internal", "/keep"));
    ASSERT_TRUE(r) << last_exchange_error();
    EXPECT_EQ(r->status, 200u);
  }
  EXPECT_EQ(up.tls_handshakes(), 1u) << "one TLS connection, pooled and reused";
  for (int i = 0; i < 3; ++i) {
    auto r = raw_exchange(rb.port(), absolute_request("GET", "pay.internal", "/close"));
    ASSERT_TRUE(r) << last_exchange_error();
    EXPECT_EQ(r->status, 200u);
  }
  EXPECT_EQ(up.tls_handshakes(), 3u) << "the first /close reuses the pooled connection, then two new ones";
  EXPECT_EQ(up.tls_resumed(), 2u) << "new connections resume the origin's session";
}

/// One request to an upstream whose certificate rebound must refuse: one attempt, 502
/// tls_certificate, an error-level log line naming the dependency and the reason.
void expect_certificate_refused(const IssuedCert& cert, const std::string& tls_block, const std::string& reason) {
  ScriptedUpstream up;
  up.use_tls(cert.cert_file, cert.key_file);
  up.on("/x", respond(200));
  ReboundOptions o;
  o.extra = pay_dependency(up.port(), tls_block, "    max_retries: 3\n");
  ReboundProcess rb(o);
  auto r = raw_exchange(rb.port(), absolute_request("GET", "pay.internal", "/x"));
  EXPECT_TRUE(IsReboundError(r, 502, {"tls_certificate"}));
  if (r) {
    EXPECT_NE(r->body.find(reason), std::string::npos) << r->body;
  }
  EXPECT_EQ(up.connections(), 1u) << "a certificate error is never retried (R-4, R-9)";
  EXPECT_EQ(up.request_count(), 0u);
  ASSERT_TRUE(rb.wait_for_log("\"error_type\":\"tls_certificate\""));
  auto const log = rb.stdout_text();
  auto const at = log.find("\"error_type\":\"tls_certificate\"");
  auto const line = log.substr(log.rfind('\n', at) + 1, log.find('\n', at) - log.rfind('\n', at) - 1);
  EXPECT_NE(line.find("\"level\":\"error\""), std::string::npos) << line;
  EXPECT_NE(line.find("\"dependency\":\"pay\""), std::string::npos) << line;
  EXPECT_NE(line.find(reason), std::string::npos) << line;
}

// Two dependencies on one https origin that trust different CAs: a connection verified for
// the first is never handed to the second, which must check the certificate itself (found by
// the gRPC wire tests: the pool was keyed by scheme, host and port alone).
TEST(Tls, R9_PooledConnectionIsNotSharedAcrossDifferentTrust) {
  TestPki trusted, other;
  auto const cert = trusted.issue("server", {"localhost"});
  ScriptedUpstream up;
  up.use_tls(cert.cert_file, cert.key_file);
  up.on("/x", respond(200));
  ReboundOptions o;
  o.workers = 1;  // one pool: the second request would find the first one's connection
  o.extra = pay_dependency(up.port(), trust(trusted)) + "  wrong:\n    hosts: [wrong.internal]\n    origin: https://127.0.0.1:" +
            std::to_string(up.port()) + "\n    tls:\n" + trust(other) + "    max_retries: 1\n";
  ReboundProcess rb(o);
  auto good = raw_exchange(rb.port(), absolute_request("GET", "pay.internal", "/x"));
  ASSERT_TRUE(good) << last_exchange_error();
  EXPECT_EQ(good->status, 200u);
  auto bad = raw_exchange(rb.port(), absolute_request("GET", "wrong.internal", "/x"));
  EXPECT_TRUE(IsReboundError(bad, 502, {"tls_certificate"}));
  EXPECT_EQ(up.request_count("/x"), 1u) << "the second dependency's request never reached the origin";
}

TEST(Tls, R9_UntrustedCertificateFailsAtOnceWith502) {
  TestPki trusted, other;
  expect_certificate_refused(other.issue("server", {"localhost"}), trust(trusted),
                             "unable to get local issuer certificate");
}

TEST(Tls, R9_ExpiredCertificateFailsAtOnceWith502) {
  TestPki pki;
  expect_certificate_refused(pki.issue("server", {"localhost"}, -48h, -24h), trust(pki), "certificate has expired");
}

TEST(Tls, R9_WrongNameCertificateFailsAtOnceWith502) {
  TestPki pki;
  expect_certificate_refused(pki.issue("server", {"other.example"}), trust(pki), "hostname mismatch");
}

TEST(Tls, R9_SystemStoreDoesNotTrustAPrivateCa) {
  TestPki pki;
  expect_certificate_refused(pki.issue("server", {"localhost"}), "      server_name: localhost\n",
                             "unable to get local issuer certificate");
}

TEST(Tls, R4_HandshakeTimeoutIsRetried) {
  // Accepts and never answers the ClientHello.
  TcpServer silent([](Conn& c, TcpServer& s) {
    (void)c;
    s.sleep_for(10s);
  });
  TestPki pki;
  ReboundOptions o;
  o.extra = pay_dependency(silent.port(), trust(pki), "    max_retries: 1\n    attempt_timeout: 300ms\n");
  ReboundProcess rb(o);
  auto r = raw_exchange(rb.port(), absolute_request("GET", "pay.internal", "/x"));
  EXPECT_TRUE(IsReboundError(r, 502, {"tls_handshake_timeout"}));
  EXPECT_EQ(silent.connections(), 2u) << "a handshake timeout is retryable (R-4)";
}

TEST(Tls, MutualTlsPresentsTheClientCertificate) {
  TestPki pki;
  auto const server = pki.issue("server", {"localhost"});
  auto const client = pki.issue("client", {"checkout.rebound"});
  ScriptedUpstream up;
  up.use_tls(server.cert_file, server.key_file, pki.ca_file());
  up.on("/x", respond(200));
  ReboundOptions o;
  o.extra = pay_dependency(up.port(), trust(pki) + "      client_cert: " + client.cert_file +
                                          "\n      client_key: " + client.key_file + "\n");
  ReboundProcess rb(o);
  auto r = raw_exchange(rb.port(), absolute_request("GET", "pay.internal", "/x"));
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->status, 200u);
  EXPECT_EQ(up.last_client_cn(), "checkout.rebound");
}

TEST(Tls, AServerThatWantsAClientCertificateIsNotRetriedWithoutOne) {
  TestPki pki;
  auto const server = pki.issue("server", {"localhost"});
  ScriptedUpstream up;
  up.use_tls(server.cert_file, server.key_file, pki.ca_file());
  up.on("/x", respond(200));
  ReboundOptions o;
  o.extra = pay_dependency(up.port(), trust(pki), "    max_retries: 3\n");
  ReboundProcess rb(o);
  auto r = raw_exchange(rb.port(), absolute_request("GET", "pay.internal", "/x"));
  EXPECT_TRUE(IsReboundError(r, 502, {"upstream_protocol_error", "connect_reset"}));
  EXPECT_EQ(up.request_count(), 0u);
}

TEST(Tls, ABadCaBundleRefusesToStart) {
  TestPki pki;
  auto const cert = pki.issue("server", {"localhost"});
  ReboundOptions o;
  // A readable file that holds a key, not certificates.
  o.extra = pay_dependency(443, "      ca_file: " + cert.key_file + "\n");
  EXPECT_THROW({ ReboundProcess rb(o); }, std::runtime_error);
}

}  // namespace
}  // namespace itest::tls_test
