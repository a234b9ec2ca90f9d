// Issue 51 end to end: the concurrency limit per dependency against real sockets. Requests
// are held in the upstream by a gate, so "the limit is reached" is a state the test makes,
// not a race it hopes to win.
#include "async_helpers.hpp"

#include <future>
#include <thread>

namespace itest::concurrency_test {
namespace {

ReboundOptions limited(std::uint16_t upstream, const std::string& concurrency, int workers = 1) {
  ReboundOptions o;
  o.workers = workers;
  o.extra = "defaults:\n"
            "  backoff: {base: 5ms, cap: 20ms}\n"
            "  attempt_timeout: 10s\n"
            "dependencies:\n"
            "  svc:\n"
            "    hosts: [svc.test]\n"
            "    origin: http://127.0.0.1:" +
            std::to_string(upstream) +
            "\n"
            "    budget: {min_retries: 100000}\n"
            "    circuit_breaker: {mode: 'off'}\n"
            "    concurrency: " +
            concurrency + "\n";
  return o;
}

std::string get(std::string_view path) { return absolute_request("GET", "svc.test", path); }

std::string admin_get(ReboundProcess& rb, const std::string& path) {
  HttpClient admin(rb.admin_port());
  return admin.get(path).body;
}

}  // namespace

TEST(Concurrency, ARequestPastAFixedLimitIsAnswered503AtOnceAndNotRetried) {
  ScriptedUpstream up;
  auto held = std::make_shared<Gate>();
  Script slow;
  slow.body = "slow";
  slow.gate = held;
  up.on("/slow", slow);
  up.on("/fast", Script{});
  auto o = limited(up.port(), "{mode: fixed, limit: 2}");
  o.extra += "    max_retry_body: 4\n";  // a longer body streams through once (forward_once)
  ReboundProcess rb(o);

  auto a = std::async(std::launch::async, [&] { return raw_exchange(rb.port(), get("/slow"), 20s); });
  auto b = std::async(std::launch::async, [&] { return raw_exchange(rb.port(), get("/slow"), 20s); });
  ASSERT_TRUE(up.wait_for_requests(2));

  // The single-attempt path for a body sent once needs a slot as well.
  auto once = raw_exchange(rb.port(), absolute_request("POST", "svc.test", "/fast", {}, "a body of some length"), 10s);
  ASSERT_TRUE(once) << last_exchange_error();
  EXPECT_EQ(once->status, 503u);
  EXPECT_EQ(once->header("Rebound-Error"), "concurrency_limited");
  EXPECT_EQ(once->header("Retry-After"), "1");

  auto r = raw_exchange(rb.port(), get("/fast"), 10s);
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->status, 503u);
  EXPECT_EQ(r->header("Rebound-Error"), "concurrency_limited");
  EXPECT_EQ(r->header("Retry-After"), "1");
  EXPECT_EQ(r->header("Rebound-Attempts"), "0");
  EXPECT_EQ(r->header("Rebound-Overloaded"), "1");  // the layer above does not retry it either
  EXPECT_NE(r->body.find("concurrency limit"), std::string::npos) << r->body;
  EXPECT_EQ(up.request_count("/fast"), 0u);  // nothing was sent, and nothing was retried

  auto const deps = admin_get(rb, "/dependencies");
  EXPECT_NE(deps.find(R"("concurrency":{"mode":"fixed","limit":2,"in_flight":2})"), std::string::npos) << deps;

  held->open();
  for (auto* f : {&a, &b}) {
    auto done = f->get();
    ASSERT_TRUE(done) << last_exchange_error();
    EXPECT_EQ(done->status, 200u);
  }
  // Slots come back with the answers: the next request goes through.
  auto after = raw_exchange(rb.port(), get("/fast"), 10s);
  ASSERT_TRUE(after) << last_exchange_error();
  EXPECT_EQ(after->status, 200u);
  auto const metrics = admin_get(rb, "/metrics");
  EXPECT_NE(metrics.find("requests_limited_total{dependency=\"svc\",service=\"unknown_service\"} 2"), std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("dependency_concurrency_limit{dependency=\"svc\",service=\"unknown_service\"} 2"), std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("dependency_requests_in_flight{dependency=\"svc\",service=\"unknown_service\"} 0"), std::string::npos)
      << metrics;
}

// A retry needs a slot like any request: one whose slot was taken by another request during
// its backoff is not sent, and the client learns why.
TEST(Concurrency, ARetryWhoseSlotWasTakenDuringItsBackoffIsNotSent) {
  ScriptedUpstream up;
  auto held = std::make_shared<Gate>();
  Script slow;
  slow.gate = held;
  up.on("/slow", slow);
  Script busy;
  busy.status = 503;
  busy.body = "busy";
  up.on("/busy", busy);
  auto o = limited(up.port(), "{mode: fixed, limit: 2}");
  // The retry waits 1-2 s (decorrelated jitter starts at base): time to fill the lane.
  o.extra += "    backoff: {base: 1s, cap: 2s, jitter: decorrelated}\n";
  ReboundProcess rb(o);

  auto a = std::async(std::launch::async, [&] { return raw_exchange(rb.port(), get("/slow"), 20s); });
  ASSERT_TRUE(up.wait_for_requests(1));
  auto r = std::async(std::launch::async, [&] { return raw_exchange(rb.port(), get("/busy"), 20s); });
  ASSERT_TRUE(up.wait_for_requests(2));
  ASSERT_TRUE(rb.wait_for_log("\"retry_attempt\""));  // /busy answered 503 and gave its slot back
  auto b = std::async(std::launch::async, [&] { return raw_exchange(rb.port(), get("/slow"), 20s); });
  ASSERT_TRUE(up.wait_for_requests(3));  // the lane is full again
  auto busy_answer = r.get();
  ASSERT_TRUE(busy_answer) << last_exchange_error();
  EXPECT_EQ(busy_answer->status, 503u);
  EXPECT_EQ(busy_answer->header("Rebound-Error"), "concurrency_limited") << busy_answer->body;
  EXPECT_EQ(busy_answer->header("Rebound-Attempts"), "1");
  EXPECT_EQ(up.request_count("/busy"), 1u) << "a retry went out past the limit";
  held->open();
  for (auto* f : {&a, &b}) {
    auto done = f->get();
    ASSERT_TRUE(done) << last_exchange_error();
    EXPECT_EQ(done->status, 200u);
  }
}

// Adaptive: the minimum RTT is measured at start (probing at min_limit), then, with the
// latency at that minimum, the limit grows; both are visible on /dependencies.
TEST(Concurrency, AdaptiveMeasuresTheMinimumRttThenGrowsTheLimit) {
  ScriptedUpstream up;
  Script s;
  s.delay = 20ms;
  up.on("/item", s);
  ReboundProcess rb(limited(up.port(), "{mode: adaptive, min_limit: 2, max_limit: 100}"));

  auto deps = admin_get(rb, "/dependencies");
  EXPECT_NE(deps.find(R"("concurrency":{"mode":"adaptive","limit":2,"in_flight":0,"min_rtt_ms":null,"probing":true})"),
            std::string::npos)
      << deps;
  for (int i = 0; i < 60; ++i) {
    auto r = raw_exchange(rb.port(), get("/item"), 10s);
    ASSERT_TRUE(r) << last_exchange_error();
    ASSERT_EQ(r->status, 200u) << r->body;
  }
  deps = admin_get(rb, "/dependencies");
  EXPECT_NE(deps.find(R"("probing":false)"), std::string::npos) << deps;
  auto const at = deps.find("\"min_rtt_ms\":");
  ASSERT_NE(at, std::string::npos) << deps;
  double const min_rtt = std::stod(deps.substr(at + 13));
  EXPECT_GE(min_rtt, 20.0) << deps;  // at least the upstream's delay
  EXPECT_LT(min_rtt, 1000.0) << deps;
  auto const lim = deps.find("\"limit\":");
  ASSERT_NE(lim, std::string::npos);
  EXPECT_GT(std::stoi(deps.substr(lim + 8)), 2) << deps;  // grown past min_limit
}

// A handed-over task that meets the limit is postponed by its own backoff: not an attempt,
// not dead-lettered; it is delivered once there is room.
TEST(Concurrency, AHandedOverTaskAtTheLimitIsPostponedNotDeadLettered) {
  ScriptedUpstream up;
  auto held = std::make_shared<Gate>();
  Script slow;
  slow.gate = held;
  up.on("/slow", slow);
  up.on("/hook", respond(200));
  store_dir store;
  auto o = hooks_to(up, store,
                    "    concurrency: {mode: fixed, limit: 1}\n"
                    "    routes:\n      - match: {path_prefix: /slow}\n        context: sync\n");
  o.workers = 1;
  ReboundProcess rb(o);

  auto a = std::async(std::launch::async,
                      [&] { return raw_exchange(rb.port(), absolute_request("GET", up.authority(), "/slow"), 20s); });
  ASSERT_TRUE(up.wait_for_requests(1));  // the one slot is taken
  auto const id = accepted_task(raw_exchange(rb.port(), post(up.authority(), "/hook", "{}")), rb);
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(rb.wait_for_log("\"reason\":\"concurrency limit\"")) << rb.stdout_text();
  EXPECT_EQ(up.request_count("/hook"), 0u);
  held->open();
  auto const done = task_until(rb, id, "SUCCEEDED");
  ASSERT_EQ(status_of(done), "SUCCEEDED") << rb.stdout_text();
  EXPECT_EQ(done->get("attempts")->n, 1) << "a postponement is not an attempt";
  EXPECT_EQ(up.request_count("/hook"), 1u);
  auto r = a.get();
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->status, 200u);
}

}  // namespace itest::concurrency_test
