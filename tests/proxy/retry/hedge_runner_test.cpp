// hedged_attempt (retry/hedge.hpp) on an io_context with scripted copies instead of sockets:
// who wins, that the losers are cancelled and waited for, and what the budget, breaker and
// metrics are told. Each copy is a timer: the test lasts as long as its fastest answers.
#include "proxy/retry/hedge.hpp"

#include "proxy/retry/concurrency_lane.hpp"

#include "tests/proxy/retry/recording_gate.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <gtest/gtest.h>

#include <vector>

using namespace rebound;
using namespace rebound::retry;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

namespace hedge_runner_test {
namespace {

/// One copy's script: answer `status` (or fail with `failure`) after `delay`.
struct copy_script {
  std::chrono::milliseconds delay;
  std::optional<unsigned> status;
  std::optional<error_type> failure;
};

struct tally {
  unsigned started = 0;
  unsigned cancelled = 0;  ///< copies whose wait was cut short
  unsigned dropped = 0;
};

class scripted_copy final : public attempt_runner {
 public:
  scripted_copy(copy_script s, tally& t) : s_(s), t_(t) {}
  net::awaitable<attempt_summary> run(clock_type::time_point) override {
    ++t_.started;
    net::steady_timer timer(co_await net::this_coro::executor);
    timer.expires_after(s_.delay);
    auto [ec] = co_await timer.async_wait(use_tuple);
    attempt_summary out;
    if (ec) {
      ++t_.cancelled;
      out.failure = retry::attempt_failure{error_type::connect_reset, "cancelled"};
      co_return out;
    }
    if (s_.failure)
      out.failure = retry::attempt_failure{*s_.failure, "scripted"};
    else
      out.outcome.status = s_.status;
    co_return out;
  }
  void drop() override { ++t_.dropped; }

 private:
  copy_script s_;
  tally& t_;
};

struct recording_observer final : attempt_observer {
  std::vector<attempt_report> reports;
  std::vector<std::string> hedges, suppressed;
  void attempt_done(const attempt_report& r) override { reports.push_back(r); }
  void hedge(std::string_view outcome) override { hedges.emplace_back(outcome); }
  void hedge_suppressed(std::string_view reason) override { suppressed.emplace_back(reason); }
};

struct fixture : retry_test::log_capture {
  retry::policy policy;
  request_facts facts;
  retry_test::recording_gate gate;
  recording_observer observer;
  std::mt19937_64 rng{1};
  tally t;
  std::vector<copy_script> scripts;
  std::size_t made = 0;
  concurrency_lane* slots = nullptr;

  std::unique_ptr<attempt_runner> make() { return std::make_unique<scripted_copy>(scripts.at(made++), t); }
};

net::awaitable<void> run_once(hedged_attempt& h, attempt_summary& out, clock_type::time_point deadline) {
  out = co_await h.run(deadline);
}

attempt_summary run(fixture& f, unsigned max_hedges, std::chrono::milliseconds delay) {
  net::io_context io;
  hedged_attempt h([&f] { return f.make(); }, hedge_plan{max_hedges, delay, hedge_delay_source::fixed},
                   step_context{f.policy, f.facts, f.log, f.rng, f.gate, f.observer, true, nullptr, f.slots});
  attempt_summary out;
  net::co_spawn(io, run_once(h, out, clock_type::now() + 5s), net::detached);
  io.run();
  return out;
}

}  // namespace

TEST(HedgedAttempt, TheHedgesAnswerWinsAndTheSlowCopyIsCancelled) {
  fixture f;
  f.scripts = {{5s, 200, {}}, {1ms, 200, {}}};
  auto const out = run(f, 1, 10ms);
  EXPECT_EQ(out.outcome.status, 200u);
  EXPECT_EQ(out.hedges, 1u);
  EXPECT_EQ(out.answered_by, 1u);
  EXPECT_EQ(f.t.started, 2u);
  EXPECT_EQ(f.t.cancelled, 1u) << "the first copy's wait was cut short, not waited out";
  EXPECT_EQ(f.gate.asked, 1u) << "the hedge asked the budget like a retry";
  ASSERT_EQ(f.observer.reports.size(), 1u);  // the loser; the loop reports the winner
  EXPECT_EQ(f.observer.reports[0].attempt, 1u);
  EXPECT_TRUE(f.observer.reports[0].cancelled);
  EXPECT_EQ(f.observer.hedges, std::vector<std::string>{"won"});
  EXPECT_NE(f.log_text.str().find("hedge_sent"), std::string::npos);
}

TEST(HedgedAttempt, AFastFirstCopySendsNoHedge) {
  fixture f;
  f.scripts = {{1ms, 200, {}}};
  auto const out = run(f, 1, 200ms);
  EXPECT_EQ(out.hedges, 0u);
  EXPECT_EQ(f.t.started, 1u);
  EXPECT_EQ(f.gate.asked, 0u);
  EXPECT_TRUE(f.observer.hedges.empty());
}

TEST(HedgedAttempt, ARefusedHedgeIsNotSent) {
  fixture f;
  f.gate.grant = false;
  f.scripts = {{60ms, 200, {}}, {1ms, 200, {}}};
  auto const out = run(f, 1, 10ms);
  EXPECT_EQ(out.outcome.status, 200u);
  EXPECT_EQ(out.hedges, 0u);
  EXPECT_EQ(out.answered_by, 0u);
  EXPECT_EQ(f.t.started, 1u);
  EXPECT_EQ(f.observer.suppressed, std::vector<std::string>{"budget_exhausted"});
  EXPECT_NE(f.log_text.str().find("hedge_suppressed"), std::string::npos);
}

// Issue 51: a hedge takes a slot of its own; with the lane full (the first copy's slot is
// held, as the loop holds it) the hedge is not sent and the budget is not asked.
TEST(HedgedAttempt, AHedgeWithoutRoomInTheConcurrencyLimitIsNotSent) {
  fixture f;
  concurrency_lane lane(retry_test::fixed_concurrency(1), 1, 1);
  f.slots = &lane;
  auto first = lane.take();  // the loop's slot for the first copy
  f.scripts = {{60ms, 200, {}}, {1ms, 200, {}}};
  auto const out = run(f, 1, 10ms);
  EXPECT_EQ(out.hedges, 0u);
  EXPECT_EQ(f.t.started, 1u);
  EXPECT_EQ(f.gate.asked, 0u);
  EXPECT_EQ(f.observer.suppressed, std::vector<std::string>{"concurrency_limited"});
  first.release(false);
  // With room (a limit of 2), the hedge goes, and its slot comes back when it ends.
  fixture g;
  g.scripts = {{5s, 200, {}}, {1ms, 200, {}}};
  concurrency_lane two(retry_test::fixed_concurrency(2), 1, 1);
  g.slots = &two;
  auto loop_slot = two.take();
  auto const hedged = run(g, 1, 10ms);
  EXPECT_EQ(hedged.hedges, 1u);
  EXPECT_EQ(two.read().in_flight, 1u) << "only the loop's slot is still held";
}

TEST(HedgedAttempt, AFailedHedgeWaitsForTheFirstCopy) {
  fixture f;
  f.scripts = {{80ms, 200, {}}, {1ms, 503, {}}};
  auto const out = run(f, 1, 10ms);
  EXPECT_EQ(out.outcome.status, 200u);
  EXPECT_EQ(out.answered_by, 0u);
  EXPECT_EQ(out.hedges, 1u);
  EXPECT_EQ(f.t.cancelled, 0u);
  EXPECT_EQ(f.gate.failures, 1u) << "the hedge's 503 counts for the breaker";
  EXPECT_EQ(f.observer.hedges, std::vector<std::string>{"failed"});
}

TEST(HedgedAttempt, WhenEveryCopyFailsTheLastFailureIsTheAnswer) {
  fixture f;
  f.scripts = {{40ms, {}, error_type::connect_reset}, {1ms, 503, {}}};
  auto const out = run(f, 1, 10ms);
  ASSERT_TRUE(out.failure);
  EXPECT_EQ(out.failure->type, error_type::connect_reset);
  EXPECT_EQ(out.answered_by, 0u);
  EXPECT_EQ(out.hedges, 1u);
}

TEST(HedgedAttempt, AFinalAnswerWinsAtOnce) {
  fixture f;
  f.scripts = {{5s, 200, {}}, {1ms, 404, {}}};
  auto const out = run(f, 1, 10ms);
  EXPECT_EQ(out.outcome.status, 404u);  // not retryable: nothing better is coming
  EXPECT_EQ(f.t.cancelled, 1u);
}

TEST(HedgedAttempt, UpToMaxHedgesDelayApartWithinMaxRetries) {
  fixture f;
  f.policy.max_retries = 2;  // two hedges at most, whatever max says
  f.scripts = {{5s, 200, {}}, {5s, 200, {}}, {1ms, 200, {}}};
  auto const out = run(f, 3, 10ms);
  EXPECT_EQ(out.answered_by, 2u);
  EXPECT_EQ(out.hedges, 2u);
  EXPECT_EQ(f.t.started, 3u);
  EXPECT_EQ(f.t.cancelled, 2u);
  EXPECT_EQ(f.observer.hedges, (std::vector<std::string>{"lost", "won"}));
}

}  // namespace hedge_runner_test
