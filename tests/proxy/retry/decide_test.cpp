// `decide`, the one retry decision (R-1..R-6, R-9's expiry), table by table. Time and
// randomness are inputs: no clock is read and nothing sleeps.
#include "proxy/retry/decide.hpp"

#include <gtest/gtest.h>

#include <variant>

using namespace rebound;
using namespace rebound::retry;
using namespace std::chrono_literals;
using rebound::retry::error_type;

namespace decide_test {
namespace {

const auto t0 = std::chrono::steady_clock::time_point{} + 1000h;
// Sun, 06 Nov 1994 08:49:00 GMT
const auto wall = std::chrono::system_clock::from_time_t(784111740);

retry::policy policy(unsigned max_retries = 3) {
  retry::policy p;
  p.max_retries = max_retries;
  p.backoff.base = 100ms;
  p.backoff.cap = 1000ms;
  p.total_timeout = 30s;
  p.attempt_timeout = 2s;
  return p;
}

attempt_facts after(attempt_outcome o, unsigned attempts = 1, double u = 0.5) {
  attempt_facts f;
  f.outcome = o;
  f.attempts = attempts;
  f.now = t0;
  f.deadline = t0 + 30s;
  f.wall_now = wall;
  f.u = u;
  return f;
}

attempt_outcome status(unsigned s) { return {s, std::nullopt}; }
attempt_outcome error(error_type e) { return {std::nullopt, e}; }

std::optional<stop_reason> stopped(const decision& d) {
  if (auto const* s = std::get_if<stop>(&d)) return s->reason;
  return std::nullopt;
}
duration waited(const decision& d) { return std::get<retry_in>(d).wait; }

}  // namespace

// Every row of R-4's table: what must be retried is, what must not is not.
TEST(Decide, R4_EveryRetryableRowIsRetried) {
  for (auto o :
       {status(408), status(429), status(500), status(502), status(503), status(504),
        error(error_type::connect_refused), error(error_type::connect_reset), error(error_type::connect_timeout),
        error(error_type::attempt_timeout), error(error_type::dns_failure), error(error_type::tls_handshake_timeout)}) {
    auto const d = decide(policy(), after(o));
    EXPECT_TRUE(std::holds_alternative<retry_in>(d))
        << (o.status ? std::to_string(*o.status) : std::string(to_string(*o.error)));
  }
}

TEST(Decide, R4_EveryFinalRowAndEverySuccessStops) {
  for (auto o : {status(200), status(201), status(204), status(301), status(304), status(400), status(401), status(403),
                 status(404), status(409), status(422), status(501), status(505), error(error_type::tls_certificate)}) {
    EXPECT_EQ(stopped(decide(policy(), after(o))), stop_reason::final)
        << (o.status ? std::to_string(*o.status) : std::string(to_string(*o.error)));
  }
}

TEST(Decide, R4_RetryOnNarrowsTheRetryableSet) {
  auto p = policy();
  p.retry_on = retry_on::none();
  p.retry_on.add(retry_on::cls::s503);
  EXPECT_FALSE(stopped(decide(p, after(status(503)))));
  EXPECT_EQ(stopped(decide(p, after(status(502)))), stop_reason::final);
  EXPECT_EQ(stopped(decide(p, after(error(error_type::connect_refused)))), stop_reason::final);
}

TEST(Decide, R6_ARequestThatMayNotBeRepeatedIsNeverRetried) {
  auto f = after(status(503));
  f.may_repeat = false;
  EXPECT_EQ(stopped(decide(policy(), f)), stop_reason::not_repeatable);
}

TEST(Decide, R2_MaxRetriesCountsRetriesNotAttempts) {
  EXPECT_FALSE(stopped(decide(policy(3), after(status(503), 3))));
  EXPECT_EQ(stopped(decide(policy(3), after(status(503), 4))), stop_reason::exhausted);
  EXPECT_EQ(stopped(decide(policy(0), after(status(503), 1))), stop_reason::exhausted);
}

TEST(Decide, R4_ADnsFailureIsRetriedOnceWhateverMaxRetriesSays) {
  EXPECT_FALSE(stopped(decide(policy(5), after(error(error_type::dns_failure), 1))));
  EXPECT_EQ(stopped(decide(policy(5), after(error(error_type::dns_failure), 2))), stop_reason::exhausted);
  EXPECT_FALSE(stopped(decide(policy(5), after(status(503), 2))));  // the cap is DNS's alone
}

// R-1 full jitter: uniform(0, min(cap, base * 2^(n-1))), at both ends of the draw.
TEST(Decide, R1_FullJitterDrawsBetweenZeroAndTheDoubledBase) {
  struct row {
    unsigned attempts;
    double u;
    duration want;
  };
  for (auto r : {row{1, 0.0, 0ms}, row{1, 0.5, 50ms}, row{1, 0.999999, 99ms}, row{2, 0.999999, 199ms},
                 row{3, 0.5, 200ms}, row{10, 0.999999, 999ms}, row{10, 0.0, 0ms}}) {
    auto p = policy(20);
    EXPECT_EQ(waited(decide(p, after(status(503), r.attempts, r.u))), r.want) << r.attempts << " " << r.u;
  }
}

// R-1 decorrelated jitter: min(cap, uniform(base, previous * 3)), the base before the first.
TEST(Decide, R1_DecorrelatedJitterGrowsFromThePreviousWait) {
  auto p = policy(20);
  p.backoff.jitter = retry::jitter_kind::decorrelated;
  auto f = after(status(503), 1, 0.0);
  EXPECT_EQ(waited(decide(p, f)), 100ms);  // first retry: uniform(base, base * 3) at 0
  f.u = 0.999999;
  EXPECT_NEAR(static_cast<double>(waited(decide(p, f)).count()), 300.0, 1.0);
  f.previous_wait = 250ms;
  f.u = 0.5;
  EXPECT_NEAR(static_cast<double>(waited(decide(p, f)).count()), 100.0 + 0.5 * (750.0 - 100.0), 1.0);
  f.previous_wait = 900ms;
  f.u = 0.999999;
  EXPECT_NEAR(static_cast<double>(waited(decide(p, f)).count()), 1000.0, 1.0);  // capped
  EXPECT_LE(waited(decide(p, f)), 1000ms);
}

TEST(Decide, R5_RetryAfterInSecondsOrAsADateOverridesAShorterBackoff) {
  auto f = after(status(503), 1, 0.0);
  f.retry_after = "3";
  EXPECT_EQ(waited(decide(policy(), f)), 3s);
  f.retry_after = "Sun, 06 Nov 1994 08:49:05 GMT";
  EXPECT_EQ(waited(decide(policy(), f)), 5s);
  f.retry_after = "soon";  // unreadable: the backoff alone
  EXPECT_EQ(waited(decide(policy(), f)), 0ms);
}

TEST(Decide, R5_RetryAfterBeyondTheDeadlineStopsAtOnce) {
  auto f = after(status(503));
  f.retry_after = "31";
  auto const d = decide(policy(), f);
  ASSERT_EQ(stopped(d), stop_reason::retry_after_beyond_deadline);
  EXPECT_EQ(std::get<stop>(d).error, error_type::retry_after_exceeds_deadline);
  EXPECT_EQ(std::get<stop>(d).retry_after, 31s);
}

TEST(Decide, R3_NoRetryWhenTheWaitLeavesNoTimeForAnAttempt) {
  auto f = after(status(503), 1, 0.999999);  // waits 99 ms
  f.deadline = t0 + 120ms;                   // leaves 21 ms, under the 50 ms an attempt needs
  auto const d = decide(policy(), f);
  ASSERT_EQ(stopped(d), stop_reason::deadline);
  EXPECT_EQ(std::get<stop>(d).error, error_type::deadline_exceeded);
  f.deadline = t0 + 200ms;
  EXPECT_FALSE(stopped(decide(policy(), f)));
}

TEST(Decide, R9_NoRetryGoesOutWithTheRequestsOwnExpiredCredential) {
  auto f = after(status(503), 1, 0.999999);  // waits 99 ms
  f.credential_expires = wall + 50ms;
  EXPECT_EQ(stopped(decide(policy(), f)), stop_reason::credential_expired);
  f.credential_expires = wall + 10s;
  EXPECT_FALSE(stopped(decide(policy(), f)));
}

TEST(Decide, R3_AScheduleReplacesTheBackoffAndTheDeadlineStillBoundsIt) {
  auto p = policy(7);
  p.total_timeout = std::chrono::hours(24);
  p.schedule = {1000ms, 5000ms, 30000ms, 120000ms};
  auto f = after(status(503), 3, 0.0);
  f.deadline = t0 + std::chrono::hours(24);
  EXPECT_EQ(waited(decide(p, f)), 5000ms) << "retry 3 waits at least step 2";
  f.u = 1.0;
  EXPECT_EQ(waited(decide(p, f)), 30000ms);
  f.deadline = t0 + 10s;  // the table's step would outlive R-3's deadline
  EXPECT_EQ(stopped(decide(p, f)), stop_reason::deadline);
}

namespace {
attempt_facts grpc_after(unsigned code, std::optional<std::string_view> pushback) {
  auto f = after(attempt_outcome{200u, std::nullopt, code});
  f.grpc_pushback = pushback;
  return f;
}
}  // namespace

// gRPC's pushback is R-5's Retry-After: the wait is at least what the server asked.
TEST(Decide, R5_GrpcPushbackIsWaitedAtLeast) {
  auto const d = decide(policy(), grpc_after(14, "2500"));
  ASSERT_TRUE(std::holds_alternative<retry_in>(d));
  EXPECT_EQ(waited(d), 2500ms);
}

// gRPC A6: a negative or malformed pushback means the server asks not to be retried.
TEST(Decide, R5_NegativeOrMalformedGrpcPushbackStopsRetries) {
  for (std::string_view bad : {"-1", "soon", "", "1.5"})
    EXPECT_EQ(stopped(decide(policy(), grpc_after(14, bad))), stop_reason::pushback_refused) << bad;
}

TEST(Decide, R5_GrpcPushbackBeyondDeadlineFailsAtOnce) {
  EXPECT_EQ(stopped(decide(policy(), grpc_after(14, "31000"))), stop_reason::retry_after_beyond_deadline);
}

// A pushback on a final status changes nothing: R-4 is asked first.
TEST(Decide, R4_GrpcFinalStatusIsNotRetriedWhateverThePushback) {
  EXPECT_EQ(stopped(decide(policy(), grpc_after(3, "10"))), stop_reason::final);
}

// ---- Issue 22: one layer retries ----

namespace {

attempt_facts from_below(attempt_outcome o, layer_signal below, unsigned attempts = 1) {
  auto f = after(o, attempts);
  f.below = below;
  return f;
}

}  // namespace

TEST(Decide, Layered_ExhaustedBelowIsNotRetriedAgain) {
  auto const d = decide(policy(), from_below(status(503), {.gave_up = true}));
  EXPECT_EQ(stopped(d), stop_reason::layered);
  EXPECT_EQ(to_string(stop_reason::layered), "layered");
}

TEST(Decide, Layered_RetryLayeredTrueRetriesAsBefore) {
  auto p = policy();
  p.retry_layered = true;
  EXPECT_TRUE(std::holds_alternative<retry_in>(decide(p, from_below(status(503), {.gave_up = true}))));
}

// A layer below that shed the call is backed off from, whatever retry_layered says.
TEST(Decide, Layered_OverloadedBelowIsNeverRetried) {
  auto p = policy();
  p.retry_layered = true;
  auto const d = decide(p, from_below(status(503), {.overloaded = true}));
  EXPECT_EQ(stopped(d), stop_reason::overloaded);
  EXPECT_EQ(to_string(stop_reason::overloaded), "overloaded");
}

// The signals only stop what would have been retried: a success or a final status stays
// `final`, a request that may not be repeated stays `not_repeatable`.
TEST(Decide, Layered_SignalsChangeOnlyRetryableOutcomes) {
  EXPECT_EQ(stopped(decide(policy(), from_below(status(200), {.gave_up = true, .overloaded = true}))),
            stop_reason::final);
  EXPECT_EQ(stopped(decide(policy(), from_below(status(404), {.gave_up = true}))), stop_reason::final);
  auto f = from_below(status(503), {.gave_up = true});
  f.may_repeat = false;
  EXPECT_EQ(stopped(decide(policy(), f)), stop_reason::not_repeatable);
}

// A plain 503 from below is retried as R-4 says, and R-5's Retry-After still decides the wait.
TEST(Decide, Layered_NoSignalKeepsR4AndR5) {
  EXPECT_TRUE(std::holds_alternative<retry_in>(decide(policy(), from_below(status(503), {}))));
  auto f = from_below(status(503), {});
  f.retry_after = "2";
  auto const d = decide(policy(), f);
  ASSERT_TRUE(std::holds_alternative<retry_in>(d));
  EXPECT_GE(waited(d), 2000ms);
}

}  // namespace decide_test
