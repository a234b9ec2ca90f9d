// The inbound gate's decisions (R-6's server side) as values: what a head asks the gate to
// hold, what a claim's answer means, what the app's answer does to the key. No sockets, no
// store: gate_test.cpp runs the same rules through the real door and a real SQLite store.
#include "proxy/inbound/gate_step.hpp"

#include "proxy/inbound/fingerprint.hpp"

#include <gtest/gtest.h>

namespace gate_step_test {
namespace {

using namespace rebound;
using namespace rebound::inbound;
using namespace std::chrono_literals;

config::inbound_route keyed_route() {
  config::inbound_route r;
  r.match.path_prefix = "/payments";
  r.idempotency.enabled = true;
  r.idempotency.ttl = 24h;
  return r;
}

http::head_fields head(std::initializer_list<std::pair<std::string, std::string>> fields) {
  http::head_fields h;
  for (auto const& [name, value] : fields) h.insert(name, value);
  return h;
}

const std::string authorization = "Authorization";

held_key held(const std::variant<held_key, gate_refusal>& v) {
  EXPECT_TRUE(std::holds_alternative<held_key>(v)) << std::get<gate_refusal>(v).message;
  return std::holds_alternative<held_key>(v) ? std::get<held_key>(v) : held_key{};
}

gate_refusal refused(const std::variant<held_key, gate_refusal>& v) {
  EXPECT_TRUE(std::holds_alternative<gate_refusal>(v));
  return std::holds_alternative<gate_refusal>(v) ? std::get<gate_refusal>(v) : gate_refusal{0, {}, {}, {}};
}

TEST(GateStep, R6_AKeyIsHeldInItsCallersScopeOnItsRoutesPrefix) {
  auto const route = keyed_route();
  auto const alice = held(key_to_hold(head({{"Idempotency-Key", "\"pay-1\""}, {"Authorization", "Bearer alice"}}),
                                      "POST", route, authorization));
  EXPECT_EQ(alice.key, "pay-1");  // the Structured Field string, unquoted
  EXPECT_FALSE(alice.event);
  EXPECT_EQ(alice.scope, "key\n" + sha256_hex("Bearer alice").substr(0, 32) + "\n/payments\npay-1");
  // The same key from another caller is another key: keys are the caller's own.
  auto const bob = held(
      key_to_hold(head({{"Idempotency-Key", "pay-1"}, {"Authorization", "Bearer bob"}}), "POST", route, authorization));
  EXPECT_NE(bob.scope, alice.scope);
  // A caller without the field shares the anonymous space; a route that does not scope keys by
  // caller puts every caller in one.
  EXPECT_EQ(held(key_to_hold(head({{"Idempotency-Key", "k"}}), "POST", route, authorization)).scope,
            "key\nanonymous\n/payments\nk");
  auto shared = route;
  shared.idempotency.scope_principal = false;
  EXPECT_EQ(held(key_to_hold(head({{"Idempotency-Key", "k"}, {"Authorization", "Bearer bob"}}), "POST", shared,
                             authorization))
                .scope,
            "key\n*\n/payments\nk");
}

TEST(GateStep, R6_AMalformedOrRepeatedKeyIsRefused400BeforeAnythingIsHeld) {
  auto const route = keyed_route();
  for (auto const& bad : {head({{"Idempotency-Key", "a,b"}}), head({{"Idempotency-Key", std::string(65, 'k')}}),
                          head({{"Idempotency-Key", "one"}, {"Idempotency-Key", "two"}})}) {
    auto const r = refused(key_to_hold(bad, "POST", route, authorization));
    EXPECT_EQ(r.status, 400u);
    EXPECT_EQ(r.type, "idempotency.key_invalid");
    EXPECT_EQ(r.trace_status, "refused");
  }
}

TEST(GateStep, R6_ARequiredKeyThatIsMissingIsRefusedNamingTheMethod) {
  auto route = keyed_route();
  route.idempotency.require = true;
  auto const r = refused(key_to_hold(head({}), "PATCH", route, authorization));
  EXPECT_EQ(r.status, 400u);
  EXPECT_EQ(r.type, "idempotency.key_missing");
  EXPECT_NE(r.message.find("PATCH"), std::string::npos);
}

TEST(GateStep, R6_ACallerNamedTwiceIsRefusedSinceWhichOneIsMeantIsUnknown) {
  auto const r = refused(
      key_to_hold(head({{"Idempotency-Key", "k"}, {"X-User", "a"}, {"X-User", "b"}}), "POST", keyed_route(), "X-User"));
  EXPECT_EQ(r.status, 400u);
  EXPECT_EQ(r.type, "bad_request");
  EXPECT_NE(r.message.find("X-User"), std::string::npos);
}

TEST(GateStep, R6_NothingIsHeldWithoutAKeyOrOnAMethodWhoseKeysTheRouteDoesNotKeep) {
  auto const route = keyed_route();
  EXPECT_FALSE(held(key_to_hold(head({}), "POST", route, authorization)).holds());
  // GET is not among a route's default methods (POST, PATCH): its key is not the gate's.
  EXPECT_FALSE(held(key_to_hold(head({{"Idempotency-Key", "k"}}), "GET", route, authorization)).holds());
}

TEST(GateStep, R6_AnEventIdIsHeldOnItsRoutesPrefixAndAKeyComesFirst) {
  auto route = keyed_route();
  route.match.path_prefix = "/hooks";
  route.dedupe.header = "webhook-id";
  route.dedupe.ttl = 24h * 7;
  auto const event = held(key_to_hold(head({{"webhook-id", "evt-9"}}), "POST", route, authorization));
  EXPECT_TRUE(event.event);
  EXPECT_EQ(event.scope, "event\n/hooks\nevt-9");
  // A request with both is held by its key.
  EXPECT_FALSE(
      held(key_to_hold(head({{"webhook-id", "evt-9"}, {"Idempotency-Key", "k"}}), "POST", route, authorization)).event);
  auto const long_id =
      refused(key_to_hold(head({{"webhook-id", std::string(257, 'e')}}), "POST", route, authorization));
  EXPECT_EQ(long_id.type, "idempotency.key_invalid");
  EXPECT_NE(long_id.message.find("webhook-id"), std::string::npos);
}

held_key a_key() { return {"key\n*\n/payments\nk", "k", "hash", false}; }
held_key an_event() { return {"event\n/hooks\ne", "e", "", true}; }

TEST(GateStep, R6_AFreeKeyIsClaimedAndTheAppAsked) {
  auto const step = after_claim(a_key(), {store::key_state::claimed, {}}, 422);
  EXPECT_EQ(step.move.from, "absent");
  EXPECT_EQ(step.move.to, "pending");
  EXPECT_TRUE(std::holds_alternative<to_app>(step.next));
}

TEST(GateStep, R6_AKeyInFlightIsRefused409WithRetryAfterOneSecond) {
  auto const step = after_claim(a_key(), {store::key_state::in_flight, {}}, 422);
  auto const& r = std::get<gate_refusal>(step.next);
  EXPECT_EQ(r.status, 409u);
  EXPECT_EQ(r.type, "idempotency.in_flight");
  EXPECT_EQ(r.retry_after_s, 1u);
  EXPECT_EQ(r.trace_status, "in_flight");
}

TEST(GateStep, R6_AnotherPayloadUnderAKeyGetsTheRoutesMismatchStatus) {
  for (unsigned status : {422u, 409u}) {
    auto const step = after_claim(a_key(), {store::key_state::mismatch, {}}, status);
    auto const& r = std::get<gate_refusal>(step.next);
    EXPECT_EQ(r.status, status);
    EXPECT_EQ(r.type, "idempotency.payload_mismatch");
    EXPECT_EQ(r.trace_status, "mismatch");
  }
}

TEST(GateStep, R6_ACompletedKeyReplaysItsAnswerAndARepeatedEventIsAcknowledged) {
  store::pinned_response const pinned{201, {{"Location", "/payments/7"}}, "refund-1"};
  auto const step = after_claim(a_key(), {store::key_state::replay, pinned}, 422);
  EXPECT_EQ(step.move.to, "replayed");
  auto const& again = std::get<replay>(step.next).answer;
  EXPECT_EQ(again.status, 201u);
  EXPECT_EQ(again.body, "refund-1");
  auto const ack = std::get<replay>(after_claim(an_event(), {store::key_state::replay, pinned}, 422).next).answer;
  EXPECT_EQ(ack.status, 200u);
  EXPECT_EQ(ack.body, "{\"duplicate\":true}\n");
}

TEST(GateStep, R6_AKeyWhoseAnswerWasTooLargeToKeepIsRefusedNotRunAgain) {
  store::pinned_response const status_only{200, {{std::string(not_kept_field), "1"}}, {}};
  auto const step = after_claim(a_key(), {store::key_state::replay, status_only}, 422);
  auto const& r = std::get<gate_refusal>(step.next);
  EXPECT_EQ(r.status, 409u);
  EXPECT_EQ(r.type, "idempotency.answer_not_kept");
  EXPECT_NE(r.message.find("status 200"), std::string::npos);
}

TEST(GateStep, R6_FailuresThatSayTryAgainFreeTheKeyAndOtherAnswersArePinnedForTheTtl) {
  auto const route = keyed_route();
  for (unsigned status : {500u, 503u, 429u})
    EXPECT_FALSE(settle_with(a_key(), route, {status, {}, "busy"}, true).pin) << status;
  for (unsigned status : {200u, 201u, 404u, 422u}) {
    auto const s = settle_with(a_key(), route, {status, {{"A", "b"}}, "body"}, true);
    ASSERT_TRUE(s.pin) << status;
    EXPECT_EQ(s.pin->body, "body");
    EXPECT_EQ(s.ttl, route.idempotency.ttl);
  }
}

TEST(GateStep, R6_AnEventIsKeptOnlyOnceTheAppTookIt) {
  auto route = keyed_route();
  route.dedupe.ttl = 24h * 7;
  EXPECT_FALSE(settle_with(an_event(), route, {404, {}, {}}, true).pin);
  auto const took = settle_with(an_event(), route, {202, {}, {}}, true);
  ASSERT_TRUE(took.pin);
  EXPECT_EQ(took.ttl, route.dedupe.ttl);
}

TEST(GateStep, R6_AnAnswerTooLargeToKeepPinsOnlyItsStatusMarkedNotKept) {
  auto const s = settle_with(a_key(), keyed_route(), {201, {{"Location", "/x"}}, std::string(100, 'x')}, false);
  ASSERT_TRUE(s.pin);
  EXPECT_EQ(s.pin->status, 201u);
  EXPECT_TRUE(s.pin->body.empty());
  ASSERT_EQ(s.pin->headers.size(), 1u);
  EXPECT_EQ(s.pin->headers[0].first, not_kept_field);
  auto const kept = after_settle(true, false);
  EXPECT_EQ(kept.word, "not-stored");
  EXPECT_EQ(kept.outcome, "not_kept");
  EXPECT_EQ(kept.move.to, "complete");
}

TEST(GateStep, R6_AKeyIsFreedWhenItsAnswerCouldNotBePinnedOrTheAppNeverTookIt) {
  auto const lost = after_settle(false, true);
  EXPECT_EQ(lost.move.to, "absent");
  EXPECT_EQ(lost.word, "not-stored");
  auto const stored = after_settle(true, true);
  EXPECT_EQ(stored.word, "stored");
  EXPECT_EQ(stored.outcome, "stored");
  // The app may have acted on a request whose answer never came: it stays held until the lease ends.
  EXPECT_FALSE(after_app_failure(true).release);
  EXPECT_EQ(after_app_failure(true).move.to, "pending");
  EXPECT_TRUE(after_app_failure(false).release);
}

}  // namespace
}  // namespace gate_step_test
