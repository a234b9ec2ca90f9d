// R-7 end to end: the retry budget and the circuit breaker of each dependency, seen from the
// upstream's request count, the client's answers and GET /dependencies.
#include "helpers.hpp"

#include <thread>

namespace itest::budget_breaker_test {
namespace {

Script answer(unsigned status, std::string body = "") {
  Script s;
  s.status = status;
  if (!body.empty()) s.body = body;
  return s;
}

// The dependency `name` in GET /dependencies, or nullopt.
std::optional<Json> dependency_state(const ReboundProcess& rb, const std::string& name) {
  HttpClient admin(rb.admin_port());
  auto r = admin.get("/dependencies");
  if (r.status != 200) return std::nullopt;
  auto all = parse_json(r.body);
  if (!all) return std::nullopt;
  auto const* list = all->get("dependencies");
  if (!list) return std::nullopt;
  for (auto const& d : list->a)
    if (auto const* n = d.get("name"); n && n->s == name) return d;
  return std::nullopt;
}

double number(const std::optional<Json>& j, std::string_view key) {
  if (!j) return -1;
  auto const* v = j->get(key);
  return v ? v->n : -1;
}

std::string breaker_state(const std::optional<Json>& j) {
  if (!j) return "<none>";
  auto const* b = j->get("breaker");
  auto const* s = b ? b->get("state") : nullptr;
  return s ? s->s : "<none>";
}

TEST(BudgetBreaker, R7_BudgetKeepsRetriesWithinTwentyPercentOfRequests) {
  ScriptedUpstream failing;
  failing.on("/down", answer(503, "down"));
  ScriptedUpstream healthy;
  ReboundOptions o;
  o.extra =
      "defaults:\n  backoff: {base: 1ms, cap: 5ms}\n  circuit_breaker: {mode: off}\n"
      "dependencies:\n"
      "  flaky:\n    hosts: [\"" +
      failing.authority() +
      "\"]\n    budget: {ratio: 0.2, min_retries: 0}\n"
      "  steady:\n    hosts: [\"" +
      healthy.authority() + "\"]\n";
  ReboundProcess rb(o);

  constexpr int originals = 200;
  constexpr int clients = 4;
  std::vector<std::thread> ts;
  std::atomic<int> answered_503{0};
  for (int c = 0; c < clients; ++c)
    ts.emplace_back([&] {
      HttpClient client(rb.port());
      for (int i = 0; i < originals / clients; ++i)
        if (client.get("http://" + failing.authority() + "/down").status == 503) ++answered_503;
    });
  for (auto& t : ts) t.join();

  EXPECT_EQ(answered_503.load(), originals) << "each client gets the upstream's own 503 back";
  auto const seen = failing.request_count("/down");
  // 3 retries each would be 800; R-7 allows 20% of 200 (plus at most one per worker that
  // raced for the last retry).
  EXPECT_GT(seen, static_cast<std::size_t>(originals)) << "some retries should have been allowed";
  EXPECT_LE(seen, static_cast<std::size_t>(originals * 1.2) + 2) << "the budget let too many retries through";
  auto const flaky = dependency_state(rb, "flaky");
  ASSERT_TRUE(flaky);
  EXPECT_EQ(number(flaky, "requests_in_window"), originals);
  EXPECT_LE(number(flaky, "retries_in_window"), originals * 0.2 + 2);
  EXPECT_TRUE(rb.wait_for_log("\"retry_suppressed\""));

  // Another dependency's budget is its own: untouched, and its retries still go.
  auto const steady = dependency_state(rb, "steady");
  ASSERT_TRUE(steady);
  EXPECT_EQ(number(steady, "requests_in_window"), 0);
  EXPECT_EQ(number(steady, "retries_in_window"), 0);
  EXPECT_EQ(number(steady, "budget_left"), 10) << "min_retries: 10 by default";
  healthy.on_sequence("/once", {answer(503), answer(200, "fine")});
  auto r = raw_exchange(rb.port(), absolute_request("GET", healthy.authority(), "/once"), 10s);
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->status, 200u);
  EXPECT_EQ(r->header("Rebound-Attempts").value_or(""), "2");
}

TEST(BudgetBreaker, R7_ExhaustedBudgetWithoutResponseAnswersBudgetExhausted) {
  // Nothing listens on this port: every attempt is connect_refused, so there is no
  // response to hand back when the budget says no.
  RefusingPort const dead;
  std::string const authority = dead.authority();
  ReboundOptions o;
  o.extra =
      "defaults:\n  backoff: {base: 1ms, cap: 5ms}\n  circuit_breaker: {mode: off}\n"
      "dependencies:\n  gone:\n    hosts: [\"" +
      authority + "\"]\n    budget: {min_retries: 0}\n";
  ReboundProcess rb(o);
  auto r = raw_exchange(rb.port(), absolute_request("GET", authority, "/"), 10s);
  EXPECT_TRUE(IsReboundError(r, 503, {"budget_exhausted"}));
}

TEST(BudgetBreaker, BreakerOpensFailsFastThenClosesAfterRecovery) {
  ScriptedUpstream up;
  up.on("/svc", answer(503, "down"));
  ReboundOptions o;
  o.extra =
      "dependencies:\n  svc:\n    hosts: [\"" + up.authority() +
      "\"]\n    retry_on: [connect_refused]\n"
      "    circuit_breaker: {min_requests: 5, failure_ratio: 0.5, window: 30s, open_for: 1s, half_open_probes: 2}\n";
  ReboundProcess rb(o);
  HttpClient client(rb.port());
  std::string const url = "http://" + up.authority() + "/svc";
  for (int i = 0; i < 5; ++i) EXPECT_EQ(client.get(url).status, 503u);
  EXPECT_EQ(up.request_count("/svc"), 5u);
  ASSERT_TRUE(rb.wait_for_log("\"to\":\"open\""));
  EXPECT_EQ(breaker_state(dependency_state(rb, "svc")), "open");

  // Open: fail fast, nothing reaches the upstream, and Retry-After says when to come back.
  auto fast = client.get(url);
  EXPECT_EQ(fast.status, 503u);
  EXPECT_EQ(fast.header("Rebound-Error").value_or(""), "circuit_open");
  auto const retry_after = std::stoi(fast.header("Retry-After").value_or("0"));
  EXPECT_GE(retry_after, 1);
  EXPECT_LE(retry_after, 2);
  EXPECT_EQ(up.request_count("/svc"), 5u);

  // The upstream recovers. Once open_for has passed, two probes succeed and the breaker closes.
  up.on("/svc", answer(200, "up"));
  auto const give_up = std::chrono::steady_clock::now() + 10s;
  unsigned status = 503;
  while (status != 200 && std::chrono::steady_clock::now() < give_up) {
    auto r = client.get(url);
    status = r.status;
    if (status != 200) {
      EXPECT_EQ(r.header("Rebound-Error").value_or(""), "circuit_open");
      std::this_thread::sleep_for(100ms);  // polling for the state change, not proving a duration
    }
  }
  ASSERT_EQ(status, 200u) << "the breaker never let a probe through";
  EXPECT_EQ(client.get(url).status, 200u);
  ASSERT_TRUE(rb.wait_for_log("\"to\":\"closed\"")) << rb.stdout_text();
  EXPECT_EQ(breaker_state(dependency_state(rb, "svc")), "closed");
  EXPECT_EQ(up.request_count("/svc"), 7u) << "5 failures, then the 2 probes; nothing while open";
  EXPECT_EQ(client.get(url).status, 200u);
}

TEST(BudgetBreaker, SignalModeReportsButNeverRefuses) {
  ScriptedUpstream up;
  up.on("/svc", answer(503, "down"));
  ReboundOptions o;
  o.extra = "dependencies:\n  svc:\n    hosts: [\"" + up.authority() +
            "\"]\n    retry_on: [connect_refused]\n"
            "    circuit_breaker: {mode: signal, min_requests: 3, open_for: 30s}\n";
  ReboundProcess rb(o);
  HttpClient client(rb.port());
  for (int i = 0; i < 6; ++i) {
    auto r = client.get("http://" + up.authority() + "/svc");
    EXPECT_EQ(r.status, 503u);
    EXPECT_FALSE(r.header("Rebound-Error")) << "signal mode must not fail fast";
  }
  EXPECT_EQ(up.request_count("/svc"), 6u);
  EXPECT_TRUE(rb.wait_for_log("\"to\":\"open\""));
  EXPECT_EQ(breaker_state(dependency_state(rb, "svc")), "open");
}

}  // namespace
}  // namespace itest::budget_breaker_test
