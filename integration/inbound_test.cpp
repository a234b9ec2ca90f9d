// Inbound idempotency (R-6's server side; seeds 002 and 004): rebound in front of an app, the
// real binary with its SQLite file, a scripted app and real clients. Every outcome of the
// gate, 50 identical requests at once, restarts, and the seed 004 refund example.
#include "async_helpers.hpp"

#include <atomic>
#include <regex>
#include <thread>

namespace itest::inbound_test {
namespace {

ReboundOptions in_front_of(const ScriptedUpstream& app, const store_dir& store, const std::string& routes) {
  ReboundOptions o;
  o.extra = store.yaml() + "inbound:\n  listen: 127.0.0.1:0\n  app: " + app.authority() + "\n  routes:\n" + routes;
  return o;
}

const std::string refunds = "    - match: {path_prefix: /refunds}\n      idempotency: {require: true}\n";

Response post_refund(std::uint16_t port, const std::string& key, const std::string& body,
                     const std::string& credential = "Bearer alice") {
  HttpClient c(port);
  Fields h{{"Content-Type", "application/json"}, {"Authorization", credential}};
  if (!key.empty()) h.emplace_back("Idempotency-Key", key);
  return c.request("POST", "/refunds", h, body);
}

Script created(const std::string& body) {
  Script s = respond(201);
  s.body = body;
  s.headers = {{"Content-Type", "application/json"}, {"Location", "/refunds/rf_1"}};
  return s;
}

TEST(Inbound, R6_AKeyedRequestReachesTheAppOnceAndItsDuplicateGetsTheSameAnswer) {
  ScriptedUpstream app;
  app.on("/refunds", created(R"({"id":"rf_1","amount":1000})"));
  store_dir store;
  ReboundProcess rb(in_front_of(app, store, refunds));
  auto const port = inbound_port(rb);
  auto const first = post_refund(port, "refund:ch_9ab:1000:6f6c", R"({"charge":"ch_9ab","amount":1000})");
  EXPECT_EQ(first.status, 201u) << first.body;
  EXPECT_EQ(first.header("Idempotency-Status").value_or(""), "stored");
  EXPECT_EQ(first.body, R"({"id":"rf_1","amount":1000})");
  // The same payload spelled otherwise is the same request (canonical JSON).
  auto const again = post_refund(port, "refund:ch_9ab:1000:6f6c", "{ \"amount\": 1000, \"charge\": \"ch_9ab\" }");
  EXPECT_EQ(again.status, 201u);
  EXPECT_EQ(again.header("Idempotency-Status").value_or(""), "replayed");
  EXPECT_EQ(again.body, first.body);
  EXPECT_EQ(again.header("Location").value_or(""), "/refunds/rf_1");
  EXPECT_EQ(app.request_count("/refunds"), 1u) << "one refund, one ledger entry";
  EXPECT_EQ(app.requests()[0].header("Idempotency-Key").value_or(""), "refund:ch_9ab:1000:6f6c")
      << "the app still sees the key";
}

TEST(Inbound, R6_TheSameKeyWithAnotherPayloadIs422AndNeverReachesTheApp) {
  ScriptedUpstream app;
  app.on("/refunds", created("{}"));
  store_dir store;
  ReboundProcess rb(in_front_of(app, store, refunds));
  auto const port = inbound_port(rb);
  ASSERT_EQ(post_refund(port, "k-1", R"({"amount":1000})").status, 201u);
  auto const other = post_refund(port, "k-1", R"({"amount":5000})");
  EXPECT_EQ(other.status, 422u) << other.body;
  EXPECT_NE(other.body.find("idempotency.payload_mismatch"), std::string::npos) << other.body;
  EXPECT_EQ(app.request_count("/refunds"), 1u);
}

TEST(Inbound, R6_MismatchIs409WhereTheRouteSaysSo) {
  ScriptedUpstream app;
  app.on("/refunds", created("{}"));
  store_dir store;
  ReboundProcess rb(
      in_front_of(app, store, "    - match: {path_prefix: /refunds}\n      idempotency: {mismatch_status: 409}\n"));
  auto const port = inbound_port(rb);
  ASSERT_EQ(post_refund(port, "k-2", R"({"amount":1})").status, 201u);
  auto const mismatch = post_refund(port, "k-2", R"({"amount":2})");
  EXPECT_EQ(mismatch.status, 409u);
  EXPECT_FALSE(mismatch.header("Retry-After")) << "a mismatch is fixed by a new key, not by waiting";
}

TEST(Inbound, R6_AMissingOrMalformedKeyIs400WhereOneIsRequired) {
  ScriptedUpstream app;
  app.on("/refunds", created("{}"));
  store_dir store;
  ReboundProcess rb(in_front_of(app, store, refunds));
  auto const port = inbound_port(rb);
  auto const none = post_refund(port, "", "{}");
  EXPECT_EQ(none.status, 400u);
  EXPECT_NE(none.body.find("idempotency.key_missing"), std::string::npos) << none.body;
  // Issue 29, defect 12: the gate's answers had a shape of their own; they have every rebound
  // error's (SPEC 6): Rebound-Attempts, and the dependency and attempts in the body.
  EXPECT_EQ(none.header("Rebound-Error").value_or(""), "idempotency.key_missing");
  EXPECT_EQ(none.header("Rebound-Attempts").value_or(""), "0");
  auto const j = parse_json(none.body);
  ASSERT_TRUE(j && j->get("error")) << none.body;
  EXPECT_EQ(j->get("error")->get("dependency") ? j->get("error")->get("dependency")->s : "<none>", "inbound");
  EXPECT_EQ(j->get("error")->get("attempts") ? j->get("error")->get("attempts")->n : -1, 0);
  EXPECT_EQ(post_refund(port, std::string(65, 'k'), "{}").status, 400u) << "keys are at most 64 characters";
  EXPECT_EQ(post_refund(port, "a,b", "{}").status, 400u) << "a comma means two keys folded into one field";
  EXPECT_EQ(app.request_count(), 0u);
  HttpClient c(port);
  EXPECT_EQ(c.get("/refunds/rf_1").status, 200u) << "a GET is not keyed: it goes straight through";
}

TEST(Inbound, R6_KeysAreTheCallersOwn) {
  ScriptedUpstream app;
  app.on("/refunds", created("{}"));
  store_dir store;
  ReboundProcess rb(in_front_of(app, store, refunds));
  auto const port = inbound_port(rb);
  ASSERT_EQ(post_refund(port, "shared-key", "{}", "Bearer alice").status, 201u);
  auto const bob = post_refund(port, "shared-key", "{}", "Bearer bob");
  EXPECT_EQ(bob.header("Idempotency-Status").value_or(""), "stored") << "bob's key is not alice's";
  EXPECT_EQ(app.request_count("/refunds"), 2u);
}

// Issue 29, defect 12: callers told apart by something other than Authorization (a cookie
// session behind a login page, an auth gateway's X-User-Id) shared one key space, so one
// replayed another's answer, Set-Cookie included. inbound.principal_header names the field.
TEST(Inbound, R6_AConfiguredPrincipalHeaderKeepsCallersWithoutAuthorizationApart) {
  ScriptedUpstream app;
  app.on("/refunds", created("{}"));
  store_dir store;
  auto options = in_front_of(app, store, refunds);
  options.extra += "  principal_header: X-User-Id\n";
  ReboundProcess rb(options);
  auto const port = inbound_port(rb);
  auto const as = [&](const std::string& user) {
    HttpClient c(port);
    return c.request("POST", "/refunds",
                     {{"Content-Type", "application/json"}, {"X-User-Id", user}, {"Idempotency-Key", "cart-1"}}, "{}");
  };
  ASSERT_EQ(as("u-1").status, 201u);
  EXPECT_EQ(as("u-2").header("Idempotency-Status").value_or(""), "stored") << "u-2's key is not u-1's";
  EXPECT_EQ(as("u-1").header("Idempotency-Status").value_or(""), "replayed");
  EXPECT_EQ(app.request_count("/refunds"), 2u);
}

// Issue 46, defect 3: behind a gateway that appends the identity field, a caller who sends his
// own X-User-Id: alice got alice's pinned answer; the field twice is now 400 before the store.
TEST(Inbound, R6_APrincipalFieldSentTwiceIs400AndReplaysNobodysAnswer) {
  ScriptedUpstream app;
  app.on("/refunds", created("{\"refund\":\"alice\"}"));
  store_dir store;
  auto options = in_front_of(app, store, refunds);
  options.extra += "  principal_header: X-User-Id\n";
  ReboundProcess rb(options);
  auto const port = inbound_port(rb);
  HttpClient c(port);
  ASSERT_EQ(c.request("POST", "/refunds",
                      {{"Content-Type", "application/json"}, {"X-User-Id", "alice"}, {"Idempotency-Key", "cart-1"}},
                      "{}")
                .status,
            201u);
  auto const forged = c.request("POST", "/refunds",
                                {{"Content-Type", "application/json"},
                                 {"X-User-Id", "alice"},
                                 {"X-User-Id", "mallory"},
                                 {"Idempotency-Key", "cart-1"}},
                                "{}");
  EXPECT_EQ(forged.status, 400u) << forged.body;
  EXPECT_EQ(forged.header("Idempotency-Status").value_or(""), "") << "nothing replayed";
  EXPECT_EQ(forged.body.find("alice"), std::string::npos) << forged.body;
  EXPECT_NE(forged.body.find("X-User-Id"), std::string::npos) << forged.body;
  EXPECT_EQ(app.request_count("/refunds"), 1u);
}

TEST(Inbound, R6_AServerErrorIsNotPinnedSoTheRetryReachesTheApp) {
  ScriptedUpstream app;
  app.on_sequence("/refunds", {respond(503), created("{}")});
  store_dir store;
  ReboundProcess rb(in_front_of(app, store, refunds));
  auto const port = inbound_port(rb);
  auto const failed = post_refund(port, "k-5", "{}");
  EXPECT_EQ(failed.status, 503u);
  EXPECT_EQ(failed.header("Idempotency-Status").value_or(""), "not-stored");
  auto const retried = post_refund(port, "k-5", "{}");
  EXPECT_EQ(retried.status, 201u);
  EXPECT_EQ(retried.header("Idempotency-Status").value_or(""), "stored");
  EXPECT_EQ(app.request_count("/refunds"), 2u);
}

TEST(Inbound, R6_AClientErrorIsPinnedLikeASuccess) {
  ScriptedUpstream app;
  app.on_sequence("/refunds", {respond(400), created("{}")});
  store_dir store;
  ReboundProcess rb(in_front_of(app, store, refunds));
  auto const port = inbound_port(rb);
  EXPECT_EQ(post_refund(port, "k-6", "{}").status, 400u);
  auto const again = post_refund(port, "k-6", "{}");
  EXPECT_EQ(again.status, 400u);
  EXPECT_EQ(again.header("Idempotency-Status").value_or(""), "replayed");
  EXPECT_EQ(app.request_count("/refunds"), 1u);
}

TEST(Inbound, R6_FiftyIdenticalRequestsAtOnceReachTheAppExactlyOnce) {
  ScriptedUpstream app;
  Script slow = created(R"({"id":"rf_50"})");
  slow.delay = 300ms;
  app.on("/refunds", slow);
  store_dir store;
  ReboundProcess rb(in_front_of(app, store, refunds));
  auto const port = inbound_port(rb);
  std::vector<std::thread> clients;
  std::vector<Response> answers(50);
  for (int i = 0; i < 50; ++i)
    clients.emplace_back([&, i] { answers[i] = post_refund(port, "burst-key", R"({"amount":50})"); });
  for (auto& c : clients) c.join();
  EXPECT_EQ(app.request_count("/refunds"), 1u);
  int stored = 0, replayed = 0, in_flight = 0;
  for (auto const& a : answers) {
    if (a.status == 201 && a.header("Idempotency-Status") == "stored")
      ++stored;
    else if (a.status == 201 && a.header("Idempotency-Status") == "replayed")
      ++replayed;
    else if (a.status == 409 && a.header("Retry-After"))
      ++in_flight;
    else
      ADD_FAILURE() << a.status << " " << a.body;
  }
  EXPECT_EQ(stored, 1);
  EXPECT_EQ(stored + replayed + in_flight, 50);
  EXPECT_GT(in_flight, 0) << "the app takes 300 ms: duplicates arrive while the first is in flight";
}

TEST(Inbound, R6_APinnedAnswerSurvivesARestart) {
  ScriptedUpstream app;
  app.on("/refunds", created(R"({"id":"rf_restart"})"));
  store_dir store;
  {
    ReboundProcess rb(in_front_of(app, store, refunds));
    ASSERT_EQ(post_refund(inbound_port(rb), "k-restart", "{}").status, 201u);
  }
  ReboundProcess rb(in_front_of(app, store, refunds));
  auto const again = post_refund(inbound_port(rb), "k-restart", "{}");
  EXPECT_EQ(again.header("Idempotency-Status").value_or(""), "replayed");
  EXPECT_EQ(again.body, R"({"id":"rf_restart"})");
  EXPECT_EQ(app.request_count("/refunds"), 1u);
}

TEST(Inbound, R6_ARepeatedEventIsAcknowledgedAndNeverReachesTheAppTwice) {
  ScriptedUpstream app;
  app.on("/webhooks", respond(200));
  store_dir store;
  ReboundProcess rb(
      in_front_of(app, store, "    - match: {path_prefix: /webhooks}\n      dedupe: {header: X-Event-ID}\n"));
  auto const port = inbound_port(rb);
  auto send = [&](const std::string& id) {
    HttpClient c(port);
    return c.request("POST", "/webhooks", {{"X-Event-ID", id}, {"Content-Type", "application/json"}},
                     R"({"type":"refund.succeeded"})");
  };
  EXPECT_EQ(send("evt_1").status, 200u);
  auto const dup = send("evt_1");
  EXPECT_EQ(dup.status, 200u);
  EXPECT_EQ(dup.header("Idempotency-Status").value_or(""), "replayed");
  EXPECT_EQ(send("evt_2").status, 200u);
  EXPECT_EQ(app.request_count("/webhooks"), 2u);
}

TEST(Inbound, IdempotencyOutcomesAreCountedAndLogged) {
  ScriptedUpstream app;
  app.on("/refunds", created("{}"));
  store_dir store;
  ReboundProcess rb(in_front_of(app, store, refunds));
  auto const port = inbound_port(rb);
  post_refund(port, "k-m", R"({"a":1})");
  post_refund(port, "k-m", R"({"a":1})");
  post_refund(port, "k-m", R"({"a":2})");
  post_refund(port, "", "{}");
  HttpClient admin(rb.admin_port());
  auto const m = admin.get("/metrics").body;
  for (auto const* outcome : {"stored", "replayed", "mismatch", "missing"})
    EXPECT_TRUE(std::regex_search(
        m, std::regex(std::string("idempotent_requests_total\\{[^}]*outcome=\"") + outcome + "\"[^}]*\\} 1")))
        << outcome << "\n"
        << m;
  // The log sink is asynchronous: wait for each line rather than read what has arrived so far.
  EXPECT_TRUE(rb.wait_for_log("\"to_state\":\"complete\""));
  EXPECT_TRUE(rb.wait_for_log("\"from_state\":\"complete\",\"to_state\":\"replayed\"")) << rb.stdout_text();
  EXPECT_TRUE(rb.wait_for_log("\"payload_hash\":\"")) << rb.stdout_text();
}

TEST(Inbound, R6_APinnedNoContentIsReplayedWithoutABodyOrLength) {
  ScriptedUpstream app;
  Script none = respond(204);
  none.body = "";
  app.on("/refunds", none);
  store_dir store;
  ReboundProcess rb(in_front_of(app, store, refunds));
  auto const port = inbound_port(rb);
  for (auto const* word : {"stored", "replayed"}) {
    auto r = raw_exchange(port,
                          "POST /refunds HTTP/1.1\r\nHost: api\r\nIdempotency-Key: k-204\r\n"
                          "Content-Length: 2\r\nConnection: close\r\n\r\n{}");
    ASSERT_TRUE(r) << last_exchange_error();
    EXPECT_EQ(r->status, 204u);
    EXPECT_EQ(r->header("Idempotency-Status").value_or(""), word);
    EXPECT_FALSE(r->header("Content-Length")) << "RFC 9110 8.6: no Content-Length on a 204";
  }
  EXPECT_EQ(app.request_count("/refunds"), 1u);
}

TEST(Inbound, ARequestOutsideTheRoutesIsForwardedAsItIs) {
  ScriptedUpstream app;
  app.on("/health", respond(204));
  store_dir store;
  ReboundProcess rb(in_front_of(app, store, refunds));
  HttpClient c(inbound_port(rb));
  auto const r = c.request("POST", "/health", {{"Host", "api.example"}}, "{}");
  EXPECT_EQ(r.status, 204u);
  EXPECT_FALSE(r.header("Idempotency-Status"));
  ASSERT_EQ(app.request_count("/health"), 1u);
  EXPECT_EQ(app.requests()[0].header("Host").value_or(""), "api.example") << "the Host is the caller's";
}

}  // namespace
}  // namespace itest::inbound_test

namespace itest::inbound_test {
namespace {

ReboundOptions in_front_of_slow(const ScriptedUpstream& app, const store_dir& store, const std::string& timing) {
  ReboundOptions o;
  o.extra = store.yaml() + "inbound:\n  listen: 127.0.0.1:0\n  app: " + app.authority() + "\n" + timing +
            "  routes:\n" + refunds;
  return o;
}

/// Posts the refund again until its answer is no longer `status`, at most `within`.
Response post_until_not(std::uint16_t port, const std::string& key, unsigned status, std::chrono::milliseconds within) {
  auto const end = std::chrono::steady_clock::now() + within;
  for (;;) {
    auto r = post_refund(port, key, R"({"amount":1000})");
    if (r.status != status || std::chrono::steady_clock::now() > end) return r;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace

// Issue 29, defect 9; seed 004's own example: "gateway timeout then retry (same key) -> one
// payout". The app takes longer than attempt_timeout: the client gets 504 and retries at
// once with the same key. Before, the key was freed when rebound stopped waiting, the retry
// reached the app, and the app paid out twice.
TEST(Inbound, R6_GatewayTimeoutThenRetryWithTheSameKeyIsOnePayout) {
  ScriptedUpstream app;
  auto slow = created(R"({"id":"rf_1","amount":1000})");
  slow.gate = std::make_shared<Gate>();
  app.on("/refunds", slow);
  store_dir store;
  ReboundProcess rb(in_front_of_slow(app, store, "  attempt_timeout: 300ms\n"));
  auto const port = inbound_port(rb);
  auto const first = post_refund(port, "payout-1", R"({"amount":1000})");
  EXPECT_EQ(first.status, 504u) << "a timeout is 504 (docs/operations.md, errors table): " << first.body;
  EXPECT_NE(first.body.find("attempt_timeout"), std::string::npos) << first.body;
  auto const retry = post_refund(port, "payout-1", R"({"amount":1000})");
  EXPECT_EQ(retry.status, 409u) << "the first may still be at the app: " << retry.body;
  EXPECT_NE(retry.body.find("idempotency.in_flight"), std::string::npos) << retry.body;
  EXPECT_TRUE(retry.header("Retry-After"));

  slow.gate->open();  // the app finishes the first request; rebound was still reading its answer
  auto const later = post_until_not(port, "payout-1", 409, std::chrono::seconds(10));
  EXPECT_EQ(later.status, 201u) << later.body;
  EXPECT_EQ(later.header("Idempotency-Status").value_or(""), "replayed") << "the late answer was pinned";
  EXPECT_EQ(later.body, R"({"id":"rf_1","amount":1000})");
  EXPECT_EQ(app.request_count("/refunds"), 1u) << "one payout";
}

// The app reads the request and drops the connection: it may have acted, so the key stays
// held until claim_lease has passed, and only then may a retry reach the app.
TEST(Inbound, R6_AnAppThatDropsTheConnectionKeepsTheKeyHeldForTheClaimLease) {
  ScriptedUpstream app;
  Script dropped;
  dropped.reset = true;
  app.on_sequence("/refunds", {dropped, created("{}")});
  store_dir store;
  ReboundProcess rb(in_front_of_slow(app, store, "  attempt_timeout: 1s\n  claim_lease: 2s\n"));
  auto const port = inbound_port(rb);
  auto const first = post_refund(port, "payout-2", R"({"amount":1000})");
  EXPECT_EQ(first.status, 502u) << first.body;
  auto const at_once = post_refund(port, "payout-2", R"({"amount":1000})");
  EXPECT_EQ(at_once.status, 409u) << at_once.body;
  EXPECT_EQ(app.request_count("/refunds"), 1u);
  auto const after_lease = post_until_not(port, "payout-2", 409, std::chrono::seconds(10));
  EXPECT_EQ(after_lease.status, 201u) << "the lease ran out: the key is free again";
  EXPECT_EQ(app.request_count("/refunds"), 2u);
}

// A request that provably never reached the app (nothing listens) frees its key at once.
TEST(Inbound, R6_ARequestThatNeverReachedTheAppFreesItsKeyAtOnce) {
  RefusingPort dead;
  store_dir store;
  ReboundOptions o;
  o.extra = store.yaml() + "inbound:\n  listen: 127.0.0.1:0\n  app: " + dead.authority() + "\n  routes:\n" + refunds;
  ReboundProcess rb(o);
  auto const port = inbound_port(rb);
  auto const first = post_refund(port, "payout-3", "{}");
  EXPECT_EQ(first.status, 502u) << first.body;
  EXPECT_EQ(first.header("Rebound-Error").value_or(""), "connect_refused");
  auto const again = post_refund(port, "payout-3", "{}");
  EXPECT_EQ(again.status, 502u) << "not 409: nothing is held for a request the app never saw";
}

// Issue 29, defect 12: a declared length of 10^15 on a keyed route was reserved up front:
// std::bad_alloc, an internal_error and no answer. It is a 413 before any body byte is read.
TEST(Inbound, AHugeDeclaredLengthOnAKeyedRouteIs413AtOnce) {
  ScriptedUpstream app;
  app.on("/refunds", created("{}"));
  store_dir store;
  ReboundProcess rb(in_front_of(app, store, refunds));
  auto const port = inbound_port(rb);
  RawConnection c(port);
  ASSERT_TRUE(c.send("POST /refunds HTTP/1.1\r\nHost: app\r\nIdempotency-Key: big-1\r\n"
                     "Content-Type: application/json\r\nContent-Length: 1000000000000000\r\n\r\n{"));
  auto const r = c.read_response(5s);
  ASSERT_TRUE(r) << c.last_error();
  EXPECT_EQ(r->status, 413u) << r->body;
  EXPECT_EQ(app.request_count(), 0u);
  EXPECT_EQ(rb.stdout_text().find("internal_error"), std::string::npos);
  EXPECT_EQ(post_refund(port, "big-2", "{}").status, 201u) << "the listener still serves";
}

// Issue 29, defect 11: a reload that adds keyed routes to a process started without a store
// was accepted with a warning, and then `require: true` was not enforced: duplicates reached
// the app. Such routes answer 503 until a restart opens the store.
TEST(Inbound, R6_KeyedRoutesAddedByAReloadWithoutAStoreAre503NotUnprotected) {
  ScriptedUpstream app;
  app.on("/refunds", created("{}"));
  ReboundOptions o;
  o.extra = "inbound:\n  listen: 127.0.0.1:0\n  app: " + app.authority() + "\n";
  ReboundProcess rb(o);
  auto const port = inbound_port(rb);
  write_file(rb.config_path(), rb.config_text() + "  routes:\n" + refunds);
  rb.signal(SIGHUP);
  ASSERT_TRUE(rb.wait_for_log("\"config_restart_needed\""));
  auto const r = post_refund(port, "k-no-store", "{}");
  EXPECT_EQ(r.status, 503u) << r.body;
  EXPECT_EQ(r.header("Rebound-Error").value_or(""), "store_unavailable");
  EXPECT_EQ(app.request_count(), 0u) << "never let through unprotected";
}

// Issue 29, defect 10: an answer larger than inbound.max_body was neither pinned nor protected
// (the key was freed and a duplicate ran the app again), and was held whole up to 64 MiB
// although it would not be pinned. Now it streams through, and the key keeps that it
// completed: a duplicate is refused with a clear error.
TEST(Inbound, R6_AnAnswerTooLargeToPinStreamsAndItsKeyStillRefusesADuplicate) {
  ScriptedUpstream app;
  auto big = created(std::string(3u << 20, 'r'));
  app.on("/refunds", big);
  store_dir store;
  ReboundProcess rb(in_front_of(app, store, refunds));
  auto const port = inbound_port(rb);
  auto const first = post_refund(port, "large-1", R"({"amount":1})");
  EXPECT_EQ(first.status, 201u);
  EXPECT_EQ(first.body.size(), 3u << 20) << "streamed whole to the client";
  auto const again = post_refund(port, "large-1", R"({"amount":1})");
  EXPECT_EQ(again.status, 409u) << again.body;
  EXPECT_NE(again.body.find("idempotency.answer_not_kept"), std::string::npos) << again.body;
  EXPECT_NE(again.body.find("201"), std::string::npos) << "says how the first one ended: " << again.body;
  EXPECT_EQ(app.request_count("/refunds"), 1u) << "the app ran it once";
}

// Issue 29, defect 12: a keyless upload over inbound.max_body on a route where a key is not
// required got 413, though such a request goes to the app as it is. It is now streamed
// through like any proxied request, whatever its size, and counted as unkeyed.
TEST(Inbound, AKeylessUploadWhereNoKeyIsRequiredIsStreamedToTheAppWhateverItsSize) {
  ScriptedUpstream app;
  app.on("/uploads", respond(201));
  store_dir store;
  ReboundProcess rb(in_front_of(app, store, "    - match: {path_prefix: /uploads}\n      idempotency: {require: false}\n"));
  auto const port = inbound_port(rb);
  HttpClient c(port, 30s);
  std::string const big(3u << 20, 'u');  // inbound.max_body is 1 MiB
  auto const r = c.request("POST", "/uploads", {{"Content-Type", "application/octet-stream"}}, big);
  EXPECT_EQ(r.status, 201u) << r.body;
  ASSERT_EQ(app.request_count("/uploads"), 1u);
  EXPECT_EQ(app.requests().back().body.size(), big.size()) << "the app got the whole body";
  // A keyed one is held for its fingerprint, so inbound.max_body holds: refused on its head
  // (the head alone is sent: the refusal closes the connection while a body would be on its way).
  RawConnection keyed(port);
  ASSERT_TRUE(keyed.send("POST /uploads HTTP/1.1\r\nHost: app\r\nIdempotency-Key: up-1\r\nContent-Length: " +
                         std::to_string(big.size()) + "\r\n\r\n"));
  auto const refused = keyed.read_response(5s);
  ASSERT_TRUE(refused) << keyed.last_error();
  EXPECT_EQ(refused->status, 413u);
  auto const text = HttpClient(rb.admin_port()).get("/metrics").body;
  EXPECT_NE(text.find("idempotent_requests_total{dependency=\"inbound\",outcome=\"unkeyed\""), std::string::npos)
      << text;
}

// Issue 29, defect 12: a keyed request never takes a pooled app connection (were it dead,
// whether the app took the request would be unknown), yet its connection was pooled after,
// where nothing took it: 2,000 sequential keyed POSTs left 1,041 idle app connections.
TEST(Inbound, KeyedRequestsLeaveNoIdleAppConnectionsBehind) {
  ScriptedUpstream app;
  app.on("/refunds", created(R"({"id":"rf_1"})"));
  store_dir store;
  ReboundProcess rb(in_front_of(app, store, refunds));
  auto const port = inbound_port(rb);
  auto const before = open_fds(rb.pid()).size();
  HttpClient c(port);
  for (int i = 0; i < 60; ++i) {
    auto const r = c.request("POST", "/refunds",
                             {{"Content-Type", "application/json"}, {"Authorization", "Bearer alice"},
                              {"Idempotency-Key", "pool-" + std::to_string(i)}},
                             "{}");
    ASSERT_EQ(r.status, 201u) << i << ": " << r.body;
  }
  EXPECT_EQ(app.request_count("/refunds"), 60u);
  auto const after = open_fds(rb.pid()).size();
  EXPECT_LE(after, before + 3) << "descriptors: " << before << " before, " << after << " after 60 keyed requests";
}

TEST(Inbound, LargeAnswersAreStreamedNotHeld) {
  ScriptedUpstream app;
  app.on("/refunds", created(std::string(8u << 20, 'r')));
  store_dir store;
  auto options = in_front_of(app, store, refunds);
  options.measures_memory = true;
  ReboundProcess rb(options);
  auto const port = inbound_port(rb);
  auto const before = rss_kib(rb.pid(), true);
  std::vector<std::thread> clients;
  std::atomic<int> whole{0};
  for (int i = 0; i < 3; ++i)
    clients.emplace_back([port, i, &whole] {
      // A sanitizer build relays slowly: more than post_refund's 15 s.
      HttpClient c(port, 60s);
      auto const r = c.request("POST", "/refunds",
                               {{"Content-Type", "application/json"}, {"Authorization", "Bearer alice"},
                                {"Idempotency-Key", "large-" + std::to_string(i)}},
                               "{}");
      whole += r.body.size() == (8u << 20);
    });
  for (auto& t : clients) t.join();
  EXPECT_EQ(whole.load(), 3);
  // The peak, not the RSS after: a body held whole is freed once its answer has gone.
  auto const peak = rss_kib(rb.pid(), true);
  std::cerr << "three 8 MB answers: peak RSS " << before << " -> " << peak << " KiB\n";
  // Streamed, the growth is ~3 MiB (~10 MiB under AddressSanitizer, whose allocator keeps
  // redzones and per-thread caches); held whole it would be 24 MiB and more.
  EXPECT_LT(peak, before + shadow_factor() * 16 * 1024) << "3 x 8 MB held whole would be 24 MB";
}

}  // namespace itest::inbound_test
