// Issue 22 part 3 end to end: hedged requests against an upstream that is slow only
// sometimes (the first request to a path answers after a second, the others at once). What
// is asserted is which copy's answer arrived, never a wall-clock threshold.
#include "helpers.hpp"

#include <thread>

namespace itest::hedge_test {
namespace {

Script answer(std::string body, std::chrono::milliseconds delay = 0ms, unsigned status = 200) {
  Script s;
  s.status = status;
  s.body = std::move(body);
  s.delay = delay;
  return s;
}

/// The first request to `path` is slow (1 s), every later one fast.
void slow_first(ScriptedUpstream& up, const std::string& path) {
  up.on_sequence(path, {answer("slow", 1000ms), answer("fast")});
}

/** One worker (one pool), dependency `svc.test` hedged as `hedge` says, fast backoff, a
    budget that stays out of the way unless `guards` (YAML under the dependency) says else. */
ReboundOptions hedged(std::uint16_t upstream, const std::string& hedge = "{after: 50ms, max: 1}",
                      const std::string& guards = "    budget: {min_retries: 100000}\n"
                                                  "    circuit_breaker: {mode: 'off'}\n") {
  ReboundOptions o;
  o.workers = 1;
  o.extra = "defaults:\n"
            "  backoff: {base: 5ms, cap: 20ms}\n"
            "  attempt_timeout: 5s\n"
            "dependencies:\n"
            "  svc:\n"
            "    hosts: [svc.test]\n"
            "    origin: http://127.0.0.1:" +
            std::to_string(upstream) +
            "\n"
            "    hedge: " +
            hedge + "\n" + guards;
  return o;
}

std::string request(std::string_view method, std::string_view path, std::string_view body = {}) {
  return absolute_request(method, "svc.test", path, {}, body);
}

std::string describe(const std::optional<Response>& r) {
  if (!r) return "no response (" + last_exchange_error() + ")";
  return "status " + std::to_string(r->status) + ", Rebound-Attempts: " + r->header("Rebound-Attempts").value_or("-") +
         ", body: " + r->body.substr(0, 200);
}

std::string scrape(ReboundProcess& rb) {
  HttpClient admin(rb.admin_port());
  return admin.get("/metrics").body;
}

}  // namespace

TEST(Hedge, ASlowFirstCopyLosesToTheHedge) {
  ScriptedUpstream up;
  slow_first(up, "/item");
  ReboundProcess rb(hedged(up.port()));

  auto r = raw_exchange(rb.port(), request("GET", "/item"), 20s);
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->status, 200u) << describe(r);
  EXPECT_EQ(r->body, "fast") << describe(r);  // the hedge's answer, not the first copy's
  EXPECT_EQ(r->header("Rebound-Attempts"), "2") << describe(r);
  auto const got = up.requests();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_NE(got[0].connection, got[1].connection) << "a hedge goes on a connection of its own";
  EXPECT_TRUE(rb.wait_for_log("\"hedge_sent\"")) << rb.stdout_text();
  EXPECT_TRUE(rb.wait_for_log("\"hedge_settled\"")) << rb.stdout_text();
  EXPECT_NE(rb.stdout_text().find("\"delay\":\"fixed\""), std::string::npos);
  auto const metrics = scrape(rb);
  EXPECT_NE(metrics.find("retry_hedges_total{dependency=\"svc\",outcome=\"won\""), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("retry_attempts_total{attempt_number=\"2\",dependency=\"svc\""), std::string::npos)
      << metrics;
}

// The losing copy is cancelled and its connection closed, not pooled: the upstream sees it
// go, and the next request takes the winner's pooled connection.
TEST(Hedge, TheLosersConnectionIsClosedAndNeverPooled) {
  ScriptedUpstream up;
  slow_first(up, "/item");
  up.on("/next", answer("next"));
  ReboundProcess rb(hedged(up.port()));

  auto r = raw_exchange(rb.port(), request("GET", "/item"), 20s);
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->body, "fast") << describe(r);
  auto const loser = up.requests().at(0).connection;
  auto const winner = up.requests().at(1).connection;
  // The upstream finds the loser's connection closed once it is done sleeping.
  auto const until = std::chrono::steady_clock::now() + 10s;
  while (up.closed_connections() < 1 && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(20ms);
  EXPECT_EQ(up.closed_connections(), 1u);
  auto n = raw_exchange(rb.port(), request("GET", "/next"), 10s);
  ASSERT_TRUE(n) << last_exchange_error();
  EXPECT_EQ(n->body, "next");
  auto const next_on = up.requests().at(2).connection;
  EXPECT_EQ(next_on, winner);
  EXPECT_NE(next_on, loser);
  EXPECT_EQ(up.connections(), 2u);
}

TEST(Hedge, PostIsNeverHedged) {
  ScriptedUpstream up;
  slow_first(up, "/orders");
  ReboundProcess rb(hedged(up.port()));

  auto r = raw_exchange(rb.port(), request("POST", "/orders", "{\"n\":1}"), 20s);
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->body, "slow") << describe(r);  // the one copy's answer, however long it took
  EXPECT_EQ(r->header("Rebound-Attempts"), "1") << describe(r);
  EXPECT_EQ(up.request_count("/orders"), 1u);
  EXPECT_EQ(rb.stdout_text().find("\"hedge_sent\""), std::string::npos) << rb.stdout_text();
}

// A retryable failure of one copy while another is in flight is counted, and the other is
// waited for rather than the request being counted done.
TEST(Hedge, AFailedHedgeWaitsForTheFirstCopy) {
  ScriptedUpstream up;
  up.on_sequence("/item", {answer("slow", 600ms), answer("busy", 0ms, 503)});
  ReboundProcess rb(hedged(up.port()));

  auto r = raw_exchange(rb.port(), request("GET", "/item"), 20s);
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->status, 200u) << describe(r);
  EXPECT_EQ(r->body, "slow") << describe(r);
  EXPECT_EQ(r->header("Rebound-Attempts"), "2") << describe(r);
  EXPECT_EQ(up.request_count("/item"), 2u);
  EXPECT_TRUE(rb.wait_for_log("\"hedge_copy_failed\"")) << rb.stdout_text();
  auto const metrics = scrape(rb);
  EXPECT_NE(metrics.find("retry_hedges_total{dependency=\"svc\",outcome=\"failed\""), std::string::npos) << metrics;
}

// a hedge is permitted by the budget like a retry; refused, it is simply not sent.
TEST(Hedge, NoHedgeWhenTheBudgetIsSpent) {
  ScriptedUpstream up;
  slow_first(up, "/item");
  ReboundProcess rb(hedged(up.port(), "{after: 50ms, max: 1}",
                           "    budget: {ratio: 0.2, min_retries: 0}\n"
                           "    circuit_breaker: {mode: 'off'}\n"));

  auto r = raw_exchange(rb.port(), request("GET", "/item"), 20s);
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->body, "slow") << describe(r);
  EXPECT_EQ(r->header("Rebound-Attempts"), "1") << describe(r);
  EXPECT_EQ(up.request_count("/item"), 1u);
  EXPECT_TRUE(rb.wait_for_log("\"hedge_suppressed\"")) << rb.stdout_text();
  EXPECT_NE(rb.stdout_text().find("retry budget exhausted"), std::string::npos) << rb.stdout_text();
  auto const metrics = scrape(rb);
  EXPECT_NE(metrics.find("retry_hedges_suppressed_total{dependency=\"svc\",reason=\"budget_exhausted\""),
            std::string::npos)
      << metrics;
}

// Never while the breaker is not closed: half-open lets trial requests through, not hedges.
TEST(Hedge, NoHedgeWhileTheBreakerIsNotClosed) {
  ScriptedUpstream up;
  up.on("/fail", answer("down", 0ms, 503));
  slow_first(up, "/item");
  ReboundProcess rb(hedged(up.port(), "{after: 50ms, max: 1}",
                           "    budget: {min_retries: 100000}\n"
                           "    circuit_breaker: {mode: enforce, min_requests: 4, failure_ratio: 0.5, "
                           "open_for: 300ms}\n"));
  for (int i = 0; i < 2; ++i) raw_exchange(rb.port(), request("GET", "/fail"), 10s);
  ASSERT_TRUE(rb.wait_for_log("\"to\":\"open\"")) << rb.stdout_text();
  std::this_thread::sleep_for(500ms);  // open_for (300 ms, +-10%) has passed: the next request is a trial

  auto r = raw_exchange(rb.port(), request("GET", "/item"), 20s);
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->body, "slow") << describe(r);
  EXPECT_EQ(up.request_count("/item"), 1u);
  EXPECT_TRUE(rb.wait_for_log("\"hedge_suppressed\"")) << rb.stdout_text();
  auto const metrics = scrape(rb);
  EXPECT_NE(metrics.find("retry_hedges_suppressed_total{dependency=\"svc\",reason=\"circuit_open\""),
            std::string::npos)
      << metrics;
}

// `after: p95`: once the dependency has enough samples, the delay is what it observed.
TEST(Hedge, AfterP95UsesTheObservedLatency) {
  ScriptedUpstream up;
  up.on("/warm", answer("warm"));
  slow_first(up, "/item");
  ReboundProcess rb(hedged(up.port(), "{after: p95, max: 1}"));
  for (int i = 0; i < 30; ++i) {
    auto r = raw_exchange(rb.port(), request("GET", "/warm"), 10s);
    ASSERT_TRUE(r) << last_exchange_error();
  }
  auto r = raw_exchange(rb.port(), request("GET", "/item"), 20s);
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->body, "fast") << describe(r);
  EXPECT_TRUE(rb.wait_for_log("\"delay\":\"p95\"")) << rb.stdout_text();
}

}  // namespace itest::hedge_test

namespace itest::hedge_test {

// `rebound check` refuses a hedge on a route whose methods are not idempotent, naming
// the line; an inherited one there is a warning, which does not block.
TEST(Hedge, CheckRefusesAHedgeOnAPostRoute) {
  auto const dir = make_temp_dir();
  auto const path = dir + "/c.yaml";
  write_file(path,
             "dependencies:\n  pay:\n    hosts: [p]\n    routes:\n"
             "      - match: {path_prefix: /v1/payments, methods: [POST]}\n"
             "        hedge: {after: 50ms}\n");
  auto const refused = run_process({rebound_binary(), "check", path}, {}, std::chrono::seconds(10));
  EXPECT_EQ(refused.exit_code, 1) << refused.out << refused.err;
  auto const all = refused.out + refused.err;
  EXPECT_NE(all.find("c.yaml:6:16: dependencies.pay.routes[0].hedge: this route's methods include POST"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("(R-6)"), std::string::npos) << all;

  write_file(path,
             "dependencies:\n  pay:\n    hosts: [p]\n    hedge: {after: 50ms}\n    routes:\n"
             "      - match: {path_prefix: /v1/payments, methods: [POST]}\n");
  auto const inherited = run_process({rebound_binary(), "check", path}, {}, std::chrono::seconds(10));
  EXPECT_EQ(inherited.exit_code, 0) << inherited.out << inherited.err;
  EXPECT_NE((inherited.out + inherited.err).find("warning: dependencies.pay.routes[0].hedge"), std::string::npos)
      << inherited.out << inherited.err;
  remove_tree(dir);
}

}  // namespace itest::hedge_test
