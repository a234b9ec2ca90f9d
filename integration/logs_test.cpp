// R-10's log lines from the real binary: the correlation id taken or made (and sent upstream
// so both sides' logs join), and the fields every retry attempt carries.
#include "helpers.hpp"

#include <sstream>

namespace itest::logs_test {
namespace {

ReboundOptions fast_retries() {
  ReboundOptions o;
  o.extra = "defaults:\n  backoff: {base: 1ms, cap: 2ms}\n";
  return o;
}

/// The parsed log lines whose "event" is `event`.
std::vector<Json> events(const std::string& out, std::string_view event) {
  std::vector<Json> found;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    auto j = parse_json(line);
    if (!j) continue;
    if (auto const* e = j->get("event"); e && e->s == event) found.push_back(*j);
  }
  return found;
}

std::string text_of(const Json& j, std::string_view key) {
  auto const* v = j.get(key);
  return v ? v->s : "<missing>";
}

TEST(Logs, R10_ClientRequestIdIsForwardedUnchangedAndLogged) {
  ScriptedUpstream up;
  up.on_sequence("/a", {respond(503), respond(200)});
  ReboundProcess rb(fast_retries());
  HttpClient client(rb.port());
  EXPECT_EQ(client.get("http://" + up.authority() + "/a", {{"X-Request-ID", "req-42.alpha"}}).status, 200u);
  ASSERT_TRUE(rb.wait_for_log("\"retry_attempt\""));
  for (auto const& r : up.requests()) {
    EXPECT_EQ(r.header("X-Request-ID").value_or(""), "req-42.alpha");
    EXPECT_EQ(r.header_count("X-Request-ID"), 1u);
  }
  auto const attempts = events(rb.stdout_text(), "retry_attempt");
  ASSERT_EQ(attempts.size(), 1u);
  EXPECT_EQ(text_of(attempts[0], "correlation_id"), "req-42.alpha");
}

TEST(Logs, R10_CorrelationIdHeaderIsUsedWhenThereIsNoRequestId) {
  ScriptedUpstream up;
  up.on_sequence("/a", {respond(503), respond(200)});
  ReboundProcess rb(fast_retries());
  HttpClient client(rb.port());
  EXPECT_EQ(client.get("http://" + up.authority() + "/a", {{"X-Correlation-ID", "corr-7"}}).status, 200u);
  ASSERT_TRUE(rb.wait_for_log("\"retry_attempt\""));
  EXPECT_EQ(text_of(events(rb.stdout_text(), "retry_attempt").at(0), "correlation_id"), "corr-7");
}

TEST(Logs, R10_WithoutAnIdOneIsMadeSentUpstreamOnEveryAttemptAndLogged) {
  ScriptedUpstream up;
  up.on_sequence("/a", {respond(503), respond(503), respond(200)});
  ReboundProcess rb(fast_retries());
  HttpClient client(rb.port());
  EXPECT_EQ(client.get("http://" + up.authority() + "/a").status, 200u);
  ASSERT_TRUE(rb.wait_for_log("\"attempt\":3"));
  auto const got = up.requests();
  ASSERT_EQ(got.size(), 3u);
  auto const id = got[0].header("X-Request-ID").value_or("");
  EXPECT_EQ(id.size(), 32u) << id;
  EXPECT_EQ(id.find_first_not_of("0123456789abcdef"), std::string::npos) << id;
  for (auto const& r : got) EXPECT_EQ(r.header("X-Request-ID").value_or(""), id) << "one id for all attempts";
  auto const attempts = events(rb.stdout_text(), "retry_attempt");
  ASSERT_EQ(attempts.size(), 2u);
  for (auto const& a : attempts) EXPECT_EQ(text_of(a, "correlation_id"), id);

  // The next request gets another id.
  up.on("/b", respond(200));
  EXPECT_EQ(client.get("http://" + up.authority() + "/b").status, 200u);
  auto const later = up.requests().back().header("X-Request-ID").value_or("");
  EXPECT_EQ(later.size(), 32u);
  EXPECT_NE(later, id);
}

TEST(Logs, R10_TraceparentTraceIdIsTheCorrelationId) {
  ScriptedUpstream up;
  up.on_sequence("/a", {respond(503), respond(200)});
  ReboundProcess rb(fast_retries());
  HttpClient client(rb.port());
  auto const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  EXPECT_EQ(client.get("http://" + up.authority() + "/a", {{"traceparent", tp}}).status, 200u);
  ASSERT_TRUE(rb.wait_for_log("\"retry_attempt\""));
  EXPECT_EQ(text_of(events(rb.stdout_text(), "retry_attempt").at(0), "correlation_id"),
            "4bf92f3577b34da6a3ce929d0e0e4736");
  for (auto const& r : up.requests()) {
    EXPECT_EQ(r.header("traceparent").value_or(""), tp);
    EXPECT_FALSE(r.header("X-Request-ID")) << "the trace id already joins the logs";
  }
}

TEST(Logs, R10_UnusableRequestIdIsReplacedNotLogged) {
  ScriptedUpstream up;
  up.on_sequence("/a", {respond(503), respond(200)});
  ReboundProcess rb(fast_retries());
  HttpClient client(rb.port());
  std::string const hostile = "id with spaces \"quoted\" " + std::string(200, 'z');
  EXPECT_EQ(client.get("http://" + up.authority() + "/a", {{"X-Request-ID", hostile}}).status, 200u);
  ASSERT_TRUE(rb.wait_for_log("\"retry_attempt\""));
  auto const sent = up.requests().at(0).header("X-Request-ID").value_or("");
  EXPECT_EQ(sent.size(), 32u) << sent;
  EXPECT_EQ(up.requests().at(0).header_count("X-Request-ID"), 1u);
  EXPECT_EQ(text_of(events(rb.stdout_text(), "retry_attempt").at(0), "correlation_id"), sent);
  EXPECT_EQ(rb.stdout_text().find("zzzzzzzzzz"), std::string::npos);
}

TEST(Logs, R10_EveryRetryAttemptCarriesTheStandardsFields) {
  ScriptedUpstream up;
  up.on_sequence("/pay", {respond(502), respond(201)});
  ReboundProcess rb(fast_retries());
  HttpClient client(rb.port());
  EXPECT_EQ(client.request("POST", "http://" + up.authority() + "/pay?card=1", {{"X-Request-ID", "r1"}}, "{}").status,
            201u);
  ASSERT_TRUE(rb.wait_for_log("\"retry_attempt\""));
  auto const a = events(rb.stdout_text(), "retry_attempt").at(0);
  EXPECT_EQ(text_of(a, "correlation_id"), "r1");
  EXPECT_EQ(text_of(a, "dependency"), up.authority());
  ASSERT_TRUE(a.get("attempt") && a.get("max_attempts") && a.get("backoff_ms") && a.get("status") &&
              a.get("duration_ms"));
  EXPECT_EQ(a.get("attempt")->n, 2);
  EXPECT_EQ(a.get("max_attempts")->n, 4);
  EXPECT_GE(a.get("backoff_ms")->n, 0);
  EXPECT_LE(a.get("backoff_ms")->n, 2);
  EXPECT_EQ(a.get("status")->n, 502);
  EXPECT_EQ(text_of(a, "error_type"), "http_502");
  EXPECT_EQ(text_of(a, "method"), "POST");
  EXPECT_EQ(text_of(a, "path"), "/pay");
  // the key rebound injected, the same one the upstream saw.
  auto const key = up.requests().at(0).header("Idempotency-Key").value_or("");
  EXPECT_EQ(key.size(), 36u);
  EXPECT_EQ(text_of(a, "idempotency_key"), key);
}

}  // namespace
}  // namespace itest::logs_test
