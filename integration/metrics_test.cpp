// R-10's metrics end to end: scripted failures through the real binary, then a scrape of
// GET /metrics on the admin listener, checked by name, labels and value.
#include "helpers.hpp"

namespace itest::metrics_test {
namespace {

std::string scrape(const ReboundProcess& rb) {
  HttpClient admin(rb.admin_port());
  auto r = admin.get("/metrics");
  EXPECT_EQ(r.status, 200u);
  EXPECT_NE(r.header("Content-Type").value_or("").find("text/plain; version=0.0.4"), std::string::npos);
  return r.body;
}

/// The value of the series whose line starts with `series` (name and labels), or -1.
double value(const std::string& text, const std::string& series) {
  auto const at = text.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + series.size() + 2));
}

TEST(Metrics, R10_RetriedRequestCountsEachAttemptTheBackoffsAndTheAnswer) {
  ScriptedUpstream up;
  up.on_sequence("/flaky", {respond(503), respond(503), respond(200)});
  ReboundOptions o;
  o.extra =
      "service: checkout\ndefaults:\n  backoff: {base: 1ms, cap: 5ms}\n"
      "dependencies:\n  payments:\n    hosts: [\"" +
      up.authority() + "\"]\n";
  ReboundProcess rb(o);
  HttpClient client(rb.port());
  EXPECT_EQ(client.get("http://" + up.authority() + "/flaky").status, 200u);

  auto const text = scrape(rb);
  std::string const labels = "dependency=\"payments\",service=\"checkout\"";
  EXPECT_EQ(value(text, "retry_attempts_total{attempt_number=\"1\"," + labels + "}"), 1) << text;
  EXPECT_EQ(value(text, "retry_attempts_total{attempt_number=\"2\"," + labels + "}"), 1) << text;
  EXPECT_EQ(value(text, "retry_attempts_total{attempt_number=\"3\"," + labels + "}"), 1) << text;
  EXPECT_EQ(value(text, "retry_backoff_duration_seconds_count{" + labels + "}"), 2) << text;
  EXPECT_EQ(value(text, "upstream_request_duration_seconds_count{" + labels + "}"), 3) << text;
  EXPECT_EQ(value(text, "proxy_requests_total{code=\"200\"," + labels + "}"), 1) << text;
  EXPECT_EQ(value(text, "retry_exhausted_total{" + labels + "}"), 0) << text;
  EXPECT_EQ(value(text, "circuit_breaker_state{" + labels + "}"), 0) << text;
  EXPECT_NE(text.find("# TYPE dlq_messages_total counter"), std::string::npos) << text;
  // Seed 003's table is computed from one observation per request: three attempts, a success.
  std::string const ended = "context=\"sync\",dependency=\"payments\",outcome=\"success\",service=\"checkout\"";
  EXPECT_EQ(value(text, "retry_request_attempts_count{" + ended + "}"), 1) << text;
  EXPECT_EQ(value(text, "retry_request_attempts_sum{" + ended + "}"), 3) << text;
  EXPECT_EQ(value(text, "retry_request_attempts_bucket{" + ended + ",le=\"2\"}"), 0) << text;
  EXPECT_EQ(value(text, "retry_request_attempts_bucket{" + ended + ",le=\"3\"}"), 1) << text;
  EXPECT_EQ(text.find("\nstore_up{"), std::string::npos) << "no store, no store_up series";
}

TEST(Metrics, R10_ExhaustedRetriesAndRebound_sOwnAnswersAreCounted) {
  ScriptedUpstream up;
  up.on("/down", respond(503));
  RefusingPort const refusing;
  auto const dead = refusing.port();
  ReboundOptions o;
  o.extra =
      "service: checkout\ndefaults:\n  backoff: {base: 1ms, cap: 2ms}\n  max_retries: 2\n"
      "  circuit_breaker: {mode: off}\n";
  ReboundProcess rb(o);
  HttpClient client(rb.port());
  EXPECT_EQ(client.get("http://" + up.authority() + "/down").status, 503u);
  auto r = raw_exchange(rb.port(), absolute_request("GET", "127.0.0.1:" + std::to_string(dead), "/"), 10s);
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->status, 502u);

  auto const text = scrape(rb);
  std::string const down = "dependency=\"" + up.authority() + "\",service=\"checkout\"";
  std::string const gone = "dependency=\"127.0.0.1:" + std::to_string(dead) + "\",service=\"checkout\"";
  EXPECT_EQ(value(text, "retry_exhausted_total{" + down + "}"), 1) << text;
  EXPECT_EQ(value(text, "retry_attempts_total{attempt_number=\"3\"," + down + "}"), 1) << text;
  EXPECT_EQ(value(text, "proxy_requests_total{code=\"503\"," + down + "}"), 1) << text;
  EXPECT_EQ(value(text, "retry_exhausted_total{" + gone + "}"), 1) << text;
  EXPECT_EQ(value(text, "proxy_requests_total{code=\"502\"," + gone + "}"), 1) << text;
}

TEST(Metrics, R7_OpenBreakerAndSpentBudgetShowInTheGauges) {
  ScriptedUpstream up;
  up.on("/down", respond(503));
  ReboundOptions o;
  o.extra =
      "service: checkout\ndefaults:\n  backoff: {base: 1ms, cap: 2ms}\n"
      "dependencies:\n  payments:\n    hosts: [\"" +
      up.authority() +
      "\"]\n"
      "    budget: {min_retries: 2}\n";
  ReboundProcess rb(o);
  HttpClient client(rb.port());
  // The first request spends both retries; the second finds the budget dry, which opens the
  // breaker (open_on_budget_exhausted); the third is refused by it.
  EXPECT_EQ(client.get("http://" + up.authority() + "/down").status, 503u);
  EXPECT_EQ(client.get("http://" + up.authority() + "/down").status, 503u);
  auto refused = client.get("http://" + up.authority() + "/down");
  EXPECT_EQ(refused.header("Rebound-Error").value_or(""), "circuit_open");

  auto const text = scrape(rb);
  std::string const labels = "dependency=\"payments\",service=\"checkout\"";
  EXPECT_EQ(value(text, "circuit_breaker_state{" + labels + "}"), 2) << text;
  EXPECT_EQ(value(text, "retry_budget_utilization_ratio{" + labels + "}"), 1) << text;
  EXPECT_EQ(value(text, "proxy_requests_total{code=\"503\"," + labels + "}"), 3) << text;
}

}  // namespace
}  // namespace itest::metrics_test
