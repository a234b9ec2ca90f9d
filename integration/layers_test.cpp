// Issue 22 end to end, on chains of real rebound processes: one layer retries (the bottom
// dependency sees 1 + max_retries calls, not (1 + max_retries)^layers), Rebound-Overloaded
// stops a caller's retries, and X-Request-Timeout travels down the chain, shrinking.
#include "helpers.hpp"

#include <memory>
#include <regex>

namespace itest::layers_test {
namespace {

constexpr unsigned max_retries = 3;

Script answer(unsigned status, std::chrono::milliseconds delay = 0ms) {
  Script s;
  s.status = status;
  s.delay = delay;
  return s;
}

/** `layers` rebound processes in a row in front of `upstream`: hops[0] calls the upstream,
    hops[i] calls hops[i-1]; a client calls hops.back(). Every hop names the dependency
    `svc.test`, fast backoff, a budget and breaker that stay out of the way (so what is
    counted is the retries alone), and `policy` (YAML lines under `defaults:`). */
struct Chain {
  std::vector<std::unique_ptr<ReboundProcess>> hops;
  ReboundProcess& entry() { return *hops.back(); }
};

std::string hop_yaml(std::uint16_t next_port, const std::string& policy) {
  return "defaults:\n"
         "  max_retries: " +
         std::to_string(max_retries) +
         "\n"
         "  backoff: {base: 5ms, cap: 20ms}\n"
         "  budget: {min_retries: 100000}\n"
         "  circuit_breaker: {mode: 'off'}\n" +
         policy +
         "dependencies:\n"
         "  svc:\n"
         "    hosts: [svc.test]\n"
         "    origin: http://127.0.0.1:" +
         std::to_string(next_port) + "\n";
}

Chain chain(std::uint16_t upstream_port, int layers, const std::string& policy = {}) {
  Chain c;
  std::uint16_t next = upstream_port;
  for (int i = 0; i < layers; ++i) {
    ReboundOptions o;
    o.workers = 1;
    o.extra = hop_yaml(next, policy);
    c.hops.push_back(std::make_unique<ReboundProcess>(o));
    next = c.hops.back()->port();
  }
  return c;
}

std::string get(std::string_view path, std::string_view extra = {}) {
  return absolute_request("GET", "svc.test", path, extra);
}

std::string describe(const std::optional<Response>& r) {
  if (!r) return "no response (" + last_exchange_error() + ")";
  return "status " + std::to_string(r->status) + ", Rebound-Attempts: " + r->header("Rebound-Attempts").value_or("-") +
         ", Rebound-Error: " + r->header("Rebound-Error").value_or("-") +
         ", Rebound-Retried: " + r->header("Rebound-Retried").value_or("-") + ", body: " + r->body.substr(0, 200);
}

std::string scrape(ReboundProcess& rb) {
  HttpClient admin(rb.admin_port());
  return admin.get("/metrics").body;
}

/// The milliseconds of an `NNNms` X-Request-Timeout, or -1.
long sent_ms(const std::optional<std::string>& v) {
  std::smatch m;
  if (!v || !std::regex_match(*v, m, std::regex("([0-9]+)ms"))) return -1;
  return std::stol(m[1]);
}

// ---- one layer retries ----

TEST(Layers, TwoLayersOnlyTheBottomRetries) {
  ScriptedUpstream up;
  up.on("/down", answer(503));
  auto c = chain(up.port(), 2);
  auto r = raw_exchange(c.entry().port(), get("/down"), 20s);
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->status, 503u) << describe(r);
  EXPECT_EQ(up.request_count("/down"), 1u + max_retries);
  // The bottom gave up; the top passed its answer on after one attempt, and says so.
  EXPECT_EQ(r->header("Rebound-Retried"), "exhausted") << describe(r);
  EXPECT_EQ(r->header("Rebound-Attempts"), "1") << describe(r);
  EXPECT_TRUE(c.entry().wait_for_log("\"reason\":\"layered\"")) << c.entry().stdout_text();
  EXPECT_NE(scrape(c.entry()).find("retry_declined_total{dependency=\"svc\",reason=\"layered\""), std::string::npos);
}

TEST(Layers, ThreeLayersPutOnePlusMaxRetriesOnTheBottom) {
  ScriptedUpstream up;
  up.on("/down", answer(503));
  auto c = chain(up.port(), 3);
  auto r = raw_exchange(c.entry().port(), get("/down"), 20s);
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->status, 503u) << describe(r);
  EXPECT_EQ(up.request_count("/down"), 1u + max_retries);
}

// `retry_layered: true` is the behaviour before issue 22: every layer retries, the calls multiply.
TEST(Layers, RetryLayeredTrueMultipliesTheCallsAsBefore) {
  ScriptedUpstream up;
  up.on("/down", answer(503));
  auto c = chain(up.port(), 3, "  retry_layered: true\n");
  auto r = raw_exchange(c.entry().port(), get("/down"), 60s);
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->status, 503u) << describe(r);
  EXPECT_EQ(up.request_count("/down"), (1u + max_retries) * (1u + max_retries) * (1u + max_retries));
  EXPECT_EQ(r->header("Rebound-Attempts"), std::to_string(1 + max_retries));
}

// A layer below that shed the call (its breaker open) is backed off from, even by a caller
// that retries layered answers.
TEST(Layers, OverloadedBelowStopsTheCallersRetries) {
  ScriptedUpstream up;
  up.on("/down", answer(503));
  ReboundOptions lower;
  lower.workers = 1;
  lower.extra = hop_yaml(up.port(), "") +
                "    circuit_breaker: {mode: enforce, min_requests: 4, failure_ratio: 0.5, open_for: 60s}\n";
  ReboundProcess bottom(lower);
  ReboundOptions upper;
  upper.workers = 1;
  upper.extra = hop_yaml(bottom.port(), "  retry_layered: true\n");
  ReboundProcess top(upper);

  auto r = raw_exchange(top.port(), get("/down"), 20s);
  ASSERT_TRUE(r) << last_exchange_error();
  // Attempt 1: the bottom's four 503s open its breaker. Attempt 2: the bottom refuses at once,
  // and the top stops instead of trying twice more.
  EXPECT_EQ(r->status, 503u) << describe(r);
  EXPECT_EQ(r->header("Rebound-Overloaded"), "1") << describe(r);
  EXPECT_EQ(r->header("Rebound-Error"), "circuit_open") << describe(r);
  EXPECT_TRUE(r->has("Retry-After")) << describe(r);
  EXPECT_EQ(r->header("Rebound-Attempts"), "2") << describe(r);
  EXPECT_EQ(up.request_count("/down"), 1u + max_retries);
  EXPECT_TRUE(top.wait_for_log("\"reason\":\"overloaded\"")) << top.stdout_text();
  EXPECT_NE(scrape(top).find("retry_declined_total{dependency=\"svc\",reason=\"overloaded\""), std::string::npos);
}

// ---- deadlines travel ----

TEST(Layers, RequestTimeoutReachesTheSecondHopShorter) {
  ScriptedUpstream up;
  up.on("/ok", answer(200));
  auto c = chain(up.port(), 2);
  auto r = raw_exchange(c.entry().port(), get("/ok", "X-Request-Timeout: 5\r\n"), 20s);
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->status, 200u) << describe(r);
  auto const all = up.requests();
  ASSERT_EQ(all.size(), 1u);
  auto const& seen = all[0];
  EXPECT_EQ(seen.header_count("X-Request-Timeout"), 1u);
  auto const ms = sent_ms(seen.header("X-Request-Timeout"));
  EXPECT_GT(ms, 0) << seen.header("X-Request-Timeout").value_or("-");
  EXPECT_LT(ms, 5000) << seen.header("X-Request-Timeout").value_or("-");
}

// Each attempt sends what it has left (never more than its own attempt_timeout), replacing the
// caller's field rather than adding one.
TEST(Layers, RequestTimeoutShrinksWithEveryAttempt) {
  ScriptedUpstream up;
  up.on_sequence("/flaky", {answer(503), answer(503), answer(200)});
  ReboundOptions o;
  o.workers = 1;
  o.extra = hop_yaml(up.port(), "  attempt_timeout: 3s\n");
  ReboundProcess rb(o);
  auto r = raw_exchange(rb.port(), get("/flaky", "X-Request-Timeout: 10\r\nX-Request-Timeout: 4.5\r\n"), 20s);
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->status, 200u) << describe(r);
  auto const seen = up.requests();
  ASSERT_EQ(seen.size(), 3u);
  long previous = 4500;
  for (auto const& s : seen) {
    EXPECT_EQ(s.header_count("X-Request-Timeout"), 1u);
    auto const ms = sent_ms(s.header("X-Request-Timeout"));
    EXPECT_GT(ms, 0);
    EXPECT_LE(ms, 3000) << "capped by attempt_timeout";
    EXPECT_LE(ms, previous);
    previous = ms;
  }
  // Three attempts spent real time: the last one was offered less than the 3 s cap.
  EXPECT_LT(sent_ms(seen.back().header("X-Request-Timeout")), 3000);
}

TEST(Layers, RequestTimeoutEndsTheRequestAtTheCallersDeadline) {
  ScriptedUpstream up;
  up.on("/slow", answer(200, 5s));
  auto c = chain(up.port(), 1);
  auto const start = std::chrono::steady_clock::now();
  auto r = raw_exchange(c.entry().port(), get("/slow", "X-Request-Timeout: 300ms\r\n"), 20s);
  auto const took = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_TRUE(IsReboundError(r, 504, {"deadline_exceeded"})) << describe(r);
  EXPECT_NE(r->body.find("the caller's deadline"), std::string::npos)
      << "names whose deadline it was, not total_timeout (issue 29, 13): " << r->body;
  EXPECT_LT(took, 3s);
}

TEST(Layers, ExpiredRequestTimeoutIsAnswered504WithoutAnAttempt) {
  ScriptedUpstream up;
  up.on("/ok", answer(200));
  auto c = chain(up.port(), 1);
  for (auto const* v : {"0", "0ms", "0.0"}) {
    SCOPED_TRACE(v);
    auto r = raw_exchange(c.entry().port(), get("/ok", std::string("X-Request-Timeout: ") + v + "\r\n"), 10s);
    EXPECT_TRUE(IsReboundError(r, 504, {"deadline_exceeded"})) << describe(r);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->header("Rebound-Attempts"), "0");
  }
  EXPECT_EQ(up.request_count(), 0u);
}

TEST(Layers, MalformedRequestTimeoutIsAnswered400WithoutAnAttempt) {
  ScriptedUpstream up;
  up.on("/ok", answer(200));
  auto c = chain(up.port(), 1);
  for (auto const* v : {"abc", "1e999", "-1", "ms", "2s", "1.5ms"}) {
    SCOPED_TRACE(v);
    auto r = raw_exchange(c.entry().port(), get("/ok", std::string("X-Request-Timeout: ") + v + "\r\n"), 10s);
    EXPECT_TRUE(IsReboundError(r, 400, {"bad_request"})) << describe(r);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->header("Rebound-Attempts"), "0");
    EXPECT_NE(r->body.find("X-Request-Timeout"), std::string::npos) << r->body;
  }
  EXPECT_EQ(up.request_count(), 0u);
}

// Issue 29, defect 16: two fields mean "the shortest wins", and one field holding both values
// comma-separated is the same list (RFC 9110 section 5.3); it was refused 400.
TEST(Layers, RequestTimeoutListInOneFieldIsReadLikeTwoFields) {
  ScriptedUpstream up;
  up.on("/ok", answer(200));
  auto c = chain(up.port(), 1);
  auto r = raw_exchange(c.entry().port(), get("/ok", "X-Request-Timeout: 5, 2\r\n"), 20s);
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->status, 200u) << describe(r);
  ASSERT_EQ(up.request_count(), 1u);
  auto const ms = sent_ms(up.requests()[0].header("X-Request-Timeout"));
  EXPECT_GT(ms, 0);
  EXPECT_LE(ms, 2000) << "the shorter of the two";
  auto bad = raw_exchange(c.entry().port(), get("/ok", "X-Request-Timeout: 5, abc\r\n"), 10s);
  EXPECT_TRUE(IsReboundError(bad, 400, {"bad_request"})) << "one bad element spoils the list: " << describe(bad);
}

}  // namespace
}  // namespace itest::layers_test
