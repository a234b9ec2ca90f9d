// known secrets pushed through every path rebound has (success, retry, exhaustion, an
// error with no response, a body sent once, a malformed request, CONNECT, a tripped
// breaker), then every byte rebound wrote is searched for them: stdout and stderr at trace
// level, the admin API's /metrics, /dependencies and /config, and rebound's own error
// answers. Each secret carries the marker, so one search finds any of them.
#include "helpers.hpp"

namespace itest::redaction_test {
namespace {

constexpr std::string_view marker = "S3CR3T";

// The client's secrets, one per place a secret travels in a request.
std::string secret_headers() {
  return "Authorization: Bearer S3CR3T-authorization\r\n"
         "Proxy-Authorization: Basic S3CR3T-proxy-authorization\r\n"
         "Cookie: session=S3CR3T-cookie\r\n"
         "X-Api-Key: S3CR3T-api-key\r\n";
}
const std::string query = "?token=S3CR3T-query&card=4111111111111111";
const std::string body = "{\"card\":\"4111111111111111\",\"secret\":\"S3CR3T-request-body\"}";

Script answer(unsigned status) {
  Script s;
  s.status = status;
  s.headers = {{"Set-Cookie", "session=S3CR3T-set-cookie; HttpOnly"}, {"WWW-Authenticate", "Bearer S3CR3T-challenge"}};
  s.body = "{\"token\":\"S3CR3T-response-body\"}";
  return s;
}

std::string request(std::string_view method, const std::string& authority, std::string_view path,
                    std::string_view extra = {}) {
  return absolute_request(method, authority, std::string(path) + query, secret_headers() + std::string(extra), body);
}

/// Where a rebound-made answer could echo what it was sent.
void expect_no_secret_in_error(const std::optional<Response>& r, std::string_view what) {
  ASSERT_TRUE(r) << what << ": " << last_exchange_error();
  if (!r->has("Rebound-Error")) return;  // the upstream's answer, relayed as it is
  EXPECT_EQ(r->body.find(marker), std::string::npos) << what << ": " << r->body;
  for (auto const& [k, v] : r->headers) EXPECT_EQ(v.find(marker), std::string::npos) << what << ": " << k;
}

std::string admin_text(const ReboundProcess& rb, const std::string& path) {
  HttpClient admin(rb.admin_port());
  auto r = admin.get(path);
  EXPECT_EQ(r.status, 200u) << path;
  return r.body;
}

TEST(Redaction, R9_NoSecretReachesLogsMetricsOrTheAdminApi) {
  ScriptedUpstream up;
  up.on("/ok", answer(200));
  up.on_sequence("/flaky", {answer(503), answer(503), answer(200)});
  up.on("/down", answer(503));
  up.on("/final", answer(401));
  up.on("/big", answer(503));
  up.on("/trip", answer(500));
  TcpServer tunnel_target(echo_handler());
  RefusingPort const refusing;
  auto const dead = refusing.authority();

  ReboundOptions o;
  o.extra =
      "log_level: trace\nservice: redaction\n"
      "defaults:\n  backoff: {base: 1ms, cap: 2ms}\n  max_retries: 2\n  max_retry_body: 16B\n"
      "  circuit_breaker: {mode: off}\n"
      "dependencies:\n"
      "  kept:\n    hosts: [\"" +
      up.authority() +
      "\"]\n    max_retry_body: 1KiB\n"
      "  tripped:\n    hosts: [\"localhost:" +
      std::to_string(up.port()) +
      "\"]\n"
      "    max_retry_body: 1KiB\n"
      "    circuit_breaker: {mode: enforce, min_requests: 2, failure_ratio: 0.5, open_for: 1h}\n";
  ReboundProcess rb(o);
  auto const kept = up.authority();
  auto const tripped = "localhost:" + std::to_string(up.port());

  // Success, retry then success, retries exhausted, a final 401: all with a kept body.
  for (auto path : {"/ok", "/flaky", "/down", "/final"})
    expect_no_secret_in_error(raw_exchange(rb.port(), request("POST", kept, path)), path);
  // No response at all: upstream_error and rebound's own 502.
  expect_no_secret_in_error(raw_exchange(rb.port(), request("POST", dead, "/nowhere"), 20s), "dead port");
  // A body above max_retry_body (16B for unknown hosts): sent once, retry_disabled logged.
  expect_no_secret_in_error(
      raw_exchange(rb.port(), request("POST", "127.0.0.1:" + std::to_string(up.port()) + "", "/big")), "sent once");
  // The breaker opens, then refuses with 503 circuit_open.
  for (int i = 0; i < 4; ++i)
    expect_no_secret_in_error(raw_exchange(rb.port(), request("POST", tripped, "/trip")), "breaker");
  // A malformed request carrying secrets: rebound's 400.
  expect_no_secret_in_error(
      raw_exchange(rb.port(), "GET http://" + kept + "/bad" + query + " HTTP/1.1\r\nHost: " + kept + "\r\n" +
                                  secret_headers() + "Content-Length: 12, 13\r\n\r\n"),
      "malformed");
  // CONNECT with a proxy credential, to a live target and to a dead one.
  {
    RawConnection c(rb.port());
    ASSERT_TRUE(c.send("CONNECT " + tunnel_target.authority() + " HTTP/1.1\r\nHost: " + tunnel_target.authority() +
                       "\r\nProxy-Authorization: Basic S3CR3T-connect\r\n\r\n"));
    auto head = c.read_head();
    ASSERT_TRUE(head);
    EXPECT_EQ(head->status, 200u);
    ASSERT_TRUE(c.send("S3CR3T-tunnelled-bytes"));
    EXPECT_EQ(c.read_exactly(22), "S3CR3T-tunnelled-bytes");
  }
  expect_no_secret_in_error(raw_exchange(rb.port(), "CONNECT " + dead + " HTTP/1.1\r\nHost: " + dead +
                                                        "\r\nProxy-Authorization: Basic S3CR3T-connect\r\n\r\n"),
                            "connect to a dead port");

  // Every path above logged something; wait for the last ones before reading.
  ASSERT_TRUE(rb.wait_for_log("\"retry_exhausted\""));
  ASSERT_TRUE(rb.wait_for_log("\"retry_disabled\""));
  ASSERT_TRUE(rb.wait_for_log("\"circuit_breaker_changed\""));
  ASSERT_TRUE(rb.wait_for_log("\"method\":\"CONNECT\""));
  EXPECT_GE(up.request_count("/flaky"), 3u) << "the retry path ran";

  auto const metrics = admin_text(rb, "/metrics");
  auto const dependencies = admin_text(rb, "/dependencies");
  auto const config = admin_text(rb, "/config");
  EXPECT_EQ(rb.terminate(), 0);
  auto const out = rb.stdout_text();
  auto const err = rb.stderr_text();

  for (auto const& [name, text] : {std::pair{"stdout", &out},
                                   {"stderr", &err},
                                   {"/metrics", &metrics},
                                   {"/dependencies", &dependencies},
                                   {"/config", &config}}) {
    auto const at = text->find(marker);
    EXPECT_EQ(at, std::string::npos) << name << " leaks: " << text->substr(at == std::string::npos ? 0 : at, 200);
    EXPECT_EQ(text->find("4111111111111111"), std::string::npos) << name << " leaks the card number";
    EXPECT_EQ(text->find("token="), std::string::npos) << name << " leaks a query string";
  }
  // And the search looked at real output: the paths were logged, without their queries.
  EXPECT_NE(out.find("\"path\":\"/down\""), std::string::npos) << out;
  EXPECT_NE(out.find("\"path\":\"/nowhere\""), std::string::npos) << out;
  EXPECT_NE(config.find("\"service\":\"redaction\""), std::string::npos) << config;
  EXPECT_NE(config.find("\"tripped\":{\"hosts\":[\"" + tripped + "\"]"), std::string::npos) << config;
}

}  // namespace
}  // namespace itest::redaction_test
