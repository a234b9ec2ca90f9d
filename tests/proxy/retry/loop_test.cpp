// run_attempts (retry/loop.hpp), the one retry loop every protocol drives, on an io_context
// with scripted attempts instead of sockets: what a caller's own cancellation does to the
// dependency's breaker and budget (nothing), and that nobody is retried for a caller who left.
#include "proxy/retry/loop.hpp"

#include "proxy/retry/concurrency_lane.hpp"
#include "tests/proxy/retry/recording_gate.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <gtest/gtest.h>

using namespace rebound;
using namespace rebound::retry;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

namespace loop_test {
namespace {

/// Each attempt waits `delay`, then fails with `failure`; an attempt whose wait is cut short
/// reports what an HTTP/2 exchange reports when its caller resets the stream: a timeout.
class scripted_attempt final : public attempt_runner {
 public:
  scripted_attempt(std::chrono::milliseconds delay, error_type failure) : delay_(delay), failure_(failure) {}
  net::awaitable<attempt_summary> run(clock_type::time_point) override {
    ++runs;
    net::steady_timer timer(co_await net::this_coro::executor);
    timer.expires_after(delay_);
    auto [ec] = co_await timer.async_wait(use_tuple);
    attempt_summary out;
    out.failure = retry::attempt_failure{ec ? error_type::attempt_timeout : failure_, "scripted"};
    co_return out;
  }
  void drop() override {}
  unsigned runs = 0;

 private:
  std::chrono::milliseconds delay_;
  error_type failure_;
};

struct recording_observer final : attempt_observer {
  unsigned attempts = 0, retries = 0;
  void attempt_done(const attempt_report&) override { ++attempts; }
  void retry_scheduled(duration) override { ++retries; }
};

struct fixture : retry_test::log_capture {
  retry::policy policy;
  request_facts facts;
  retry_test::recording_gate gate;
  recording_observer observer;
  std::mt19937_64 rng{1};
  concurrency_lane* slots = nullptr;

  fixture() {
    policy.max_retries = 3;
    policy.backoff.base = 10s;  // a retry would wait far longer than any test runs
    policy.backoff.cap = 10s;
    policy.attempt_timeout = 30s;
    policy.total_timeout = 60s;
    facts.may_retry = true;
    facts.dependency = "dep";
  }

  /// Runs the loop and emits a terminal cancellation on it after `cancel_after`.
  attempts_result run(attempt_runner& attempt, std::chrono::milliseconds cancel_after) {
    net::io_context io;
    net::cancellation_signal caller;
    attempts_result out;
    bool done = false;
    net::steady_timer cancel(io, cancel_after);
    cancel.async_wait([&](error_code ec) {
      if (!ec) caller.emit(net::cancellation_type::terminal);
    });
    step_context const step{policy, facts, log, rng, gate, observer, true, nullptr, slots};
    net::co_spawn(io, run_attempts(step, attempt, loop_hooks{}),
                  net::bind_cancellation_slot(caller.slot(), [&](std::exception_ptr e, attempts_result r) {
                    EXPECT_FALSE(e) << "the loop must not throw when its caller cancels";
                    out = std::move(r);
                    done = true;
                    cancel.cancel();
                  }));
    io.run_for(5s);
    EXPECT_TRUE(done) << "the loop ended when its caller cancelled";
    return out;
  }
};

}  // namespace

// Issue 29, defect 1: a gRPC client's RST_STREAM CANCEL reached the loop as an attempt
// timeout, which the breaker counted and the budget paid a retry for.
TEST(RunAttempts, CallerCancellationDuringAnAttemptIsNobodysFailure) {
  fixture f;
  scripted_attempt attempt(5s, error_type::connect_refused);
  auto const r = f.run(attempt, 10ms);
  EXPECT_TRUE(r.client_gone);
  EXPECT_EQ(attempt.runs, 1u) << "no retry for a caller who left";
  EXPECT_EQ(f.gate.recorded, 0u) << "the breaker never hears of it";
  EXPECT_EQ(f.gate.asked, 0u) << "the R-7 budget is not charged";
  EXPECT_EQ(f.observer.retries, 0u);
  EXPECT_NE(f.log_text.str().find("\"retry_cancelled\""), std::string::npos) << f.log_text.str();
  EXPECT_NE(f.log_text.str().find("the client cancelled the request"), std::string::npos);
  EXPECT_EQ(f.log_text.str().find("retry_attempt"), std::string::npos) << "no retry is logged for nobody";
}

// The attempt's own failure was real and counted; the caller then left during the backoff:
// the retry is not sent and the cut-short wait is not reported as a drain.
TEST(RunAttempts, CallerCancellationDuringTheBackoffSendsNoRetry) {
  fixture f;
  scripted_attempt attempt(1ms, error_type::connect_refused);
  auto const r = f.run(attempt, 50ms);
  EXPECT_TRUE(r.client_gone);
  EXPECT_EQ(attempt.runs, 1u);
  EXPECT_EQ(f.gate.failures, 1u) << "the upstream's own refusal is the breaker's business";
  EXPECT_NE(f.log_text.str().find("the client cancelled the request"), std::string::npos) << f.log_text.str();
  EXPECT_EQ(f.log_text.str().find("shutting down"), std::string::npos);
}

// Without a cancellation the same attempts are retried and counted: the check above is not
// a loop that never retries.
TEST(RunAttempts, WithoutCancellationAFailureIsCountedAndRetried) {
  fixture f;
  f.policy.backoff.base = 1ms;
  f.policy.backoff.cap = 1ms;
  scripted_attempt attempt(1ms, error_type::connect_refused);
  auto const r = f.run(attempt, 4s);
  EXPECT_FALSE(r.client_gone);
  EXPECT_EQ(attempt.runs, 4u);
  EXPECT_EQ(f.gate.failures, 4u);
  EXPECT_EQ(f.gate.asked, 3u);
}

// Issue 51: an attempt needs a slot; with none the loop sends nothing and ends at once with
// concurrency_limited, which neither the breaker nor the budget hears of.
TEST(RunAttempts, AnAttemptWithoutASlotIsNotSent) {
  fixture f;
  concurrency_lane lane(retry_test::fixed_concurrency(1), 1, 1);
  f.slots = &lane;
  auto held = lane.take();
  scripted_attempt attempt(1ms, error_type::connect_refused);
  auto const r = f.run(attempt, 4s);
  EXPECT_EQ(attempt.runs, 0u);
  EXPECT_EQ(r.attempts, 0u);
  ASSERT_TRUE(r.failure);
  EXPECT_EQ(r.failure->type, error_type::concurrency_limited);
  EXPECT_EQ(f.gate.recorded, 0u);
  EXPECT_EQ(f.gate.asked, 0u);
  // Given back, the slot lets the next request's attempts through, each taking and returning it.
  held.release(false);
  f.policy.backoff.base = 1ms;
  f.policy.backoff.cap = 1ms;
  auto const again = f.run(attempt, 4s);
  EXPECT_EQ(attempt.runs, 4u);
  EXPECT_EQ(lane.read().in_flight, 0u);
}

}  // namespace loop_test

namespace loop_test {
namespace {

std::string attribute_text(const observe::span& s, std::string_view key) {
  for (auto const& a : s.attributes)
    if (a.key == key) {
      if (auto const* text = std::get_if<std::string>(&a.value)) return *text;
      if (auto const* n = std::get_if<std::int64_t>(&a.value)) return std::to_string(*n);
    }
  return "<none>";
}

observe::span attempt_span(const request_facts& f, unsigned attempt, const attempt_summary& summary = {}) {
  return traced_attempt(f, {}, {}, std::nullopt, std::chrono::system_clock::now(), attempt, summary, std::nullopt);
}

}  // namespace

// Issue 48: OpenTelemetry's HTTP client attributes; url.full names the origin connected to, in
// URL form, and never the query (R-9: facts.path has none).
TEST(TracedAttempt, CarriesOpenTelemetrysClientAttributesAndUrlFullInUrlForm) {
  request_facts f;
  f.dependency = "payments";
  f.method = "GET";
  f.path = "/pay";
  f.tls = true;
  f.server_address = "2001:db8::1";
  f.server_port = 443;
  auto s = attempt_span(f, 1);
  EXPECT_EQ(attribute_text(s, "url.full"), "https://[2001:db8::1]/pay");
  EXPECT_EQ(attribute_text(s, "server.address"), "2001:db8::1");
  EXPECT_EQ(attribute_text(s, "server.port"), "443");
  EXPECT_EQ(attribute_text(s, "rebound.dependency"), "payments");
  EXPECT_EQ(attribute_text(s, "http.request.resend_count"), "<none>") << "a first attempt is no resend";
  f.tls = false;
  f.server_address = "api.internal";
  f.server_port = 8080;
  attempt_summary failed;
  failed.failure = attempt_failure{error_type::connect_refused, "refused"};
  s = attempt_span(f, 3, failed);
  EXPECT_EQ(attribute_text(s, "url.full"), "http://api.internal:8080/pay");
  EXPECT_EQ(attribute_text(s, "http.request.resend_count"), "2");
  EXPECT_EQ(attribute_text(s, "error.type"), "connect_refused");
  EXPECT_TRUE(s.error);
}

TEST(TracedAttempt, AGrpcCallNamesItsServiceAndMethod) {
  request_facts f;
  f.grpc = true;
  f.method = "POST";
  f.path = "/shop.v1.Orders/Place";
  auto const s = attempt_span(f, 1);
  EXPECT_EQ(attribute_text(s, "rpc.system"), "grpc");
  EXPECT_EQ(attribute_text(s, "rpc.service"), "shop.v1.Orders");
  EXPECT_EQ(attribute_text(s, "rpc.method"), "Place");
  EXPECT_EQ(attribute_text(s, "url.full"), "<none>") << "no upstream described, no URL invented";
}

}  // namespace loop_test
