#include "proxy/retry/hedge.hpp"

#include "proxy/retry/classify.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/this_coro.hpp>

#include <algorithm>

namespace rebound::retry {

using clock = std::chrono::steady_clock;

std::string_view to_string(hedge_delay_source s) {
  switch (s) {
    case hedge_delay_source::fixed:
      return "fixed";
    case hedge_delay_source::p95:
      return "p95";
    case hedge_delay_source::fallback:
      return "p95_fallback";
  }
  return "fixed";
}

duration p95_fallback(duration attempt_timeout) { return std::max(attempt_timeout / 2, duration(1)); }

hedge_plan plan_hedge(const retry::policy& p, bool hedgeable, std::optional<duration> observed_p95) {
  if (!hedgeable || !p.hedge.enabled() || p.context != retry::context_kind::sync || p.max_retries == 0) return {};
  hedge_plan plan;
  plan.max = p.hedge.max;
  if (!p.hedge.after_p95) {
    plan.delay = p.hedge.after;
    plan.source = hedge_delay_source::fixed;
  } else if (observed_p95) {
    plan.delay = std::max(*observed_p95, duration(1));
    plan.source = hedge_delay_source::p95;
  } else {
    plan.delay = p95_fallback(p.attempt_timeout);
    plan.source = hedge_delay_source::fallback;
  }
  return plan;
}

unsigned hedges_allowed(const hedge_plan& plan, unsigned max_retries, unsigned attempts_so_far) {
  unsigned const left = 1 + max_retries > attempts_so_far ? 1 + max_retries - attempts_so_far : 0;
  return std::min(plan.max, left);
}

std::optional<clock::time_point> next_hedge_at(clock::time_point run_start, duration delay, unsigned sent,
                                               unsigned allowed, clock::time_point deadline) {
  if (sent >= allowed || delay.count() <= 0) return std::nullopt;
  auto const at = run_start + delay * (sent + 1);
  if (at + min_attempt_time > deadline) return std::nullopt;
  return at;
}

race_move after_copy(const attempt_outcome& outcome, const retry_on& retryable, unsigned still_in_flight) {
  if (classify(outcome, retryable) != verdict::retryable) return race_move::win;
  return still_in_flight > 0 ? race_move::wait_for_others : race_move::last_failure;
}

namespace {

/// One copy, as a coroutine of its own. A cancelled copy sees its operations fail with
/// operation_aborted (a value), not an exception.
net::awaitable<attempt_summary> run_copy(attempt_runner& r, clock::time_point deadline) {
  co_await net::this_coro::throw_if_cancelled(false);
  co_return co_await r.run(deadline);
}

attempt_outcome outcome_of(const attempt_summary& s) {
  return s.failure ? attempt_outcome{std::nullopt, s.failure->type} : s.outcome;
}

}  // namespace

hedged_attempt::hedged_attempt(factory make, const hedge_plan& plan, step_context ctx)
    : make_(std::move(make)), plan_(plan), ctx_(ctx) {}

hedged_attempt::~hedged_attempt() = default;

void hedged_attempt::launch(std::size_t i, clock::time_point deadline, unsigned number, concurrency_lane::slot slot) {
  auto& c = copies_[i];
  c.slot = std::move(slot);
  if (!c.runner) c.runner = make_();
  if (!traceparent_.empty()) c.runner->trace_as(traceparent_);
  c.running = true;
  c.settled = false;
  c.summary = {};
  c.started = clock::now();
  c.number = number;
  ++in_flight_;
  net::co_spawn(wake_->get_executor(), run_copy(*c.runner, deadline),
                net::bind_cancellation_slot(c.cancel.slot(), [this, i](std::exception_ptr e, attempt_summary s) {
                  finished(i, e, std::move(s));
                }));
}

void hedged_attempt::finished(std::size_t i, std::exception_ptr e, attempt_summary s) {
  auto& c = copies_[i];
  c.summary = std::move(s);
  if (e) {
    c.summary = {};
    c.summary.failure =
        retry::attempt_failure{error_type::upstream_protocol_error, "the attempt ended with an exception"};
  }
  c.running = false;
  c.slot.release(measures_load(c.summary));  // a copy cancelled gave its slot back unmeasured
  --in_flight_;
  fresh_ = true;
  if (wake_) wake_->cancel();
}

void hedged_attempt::account_dropped(copy& c, std::size_t i, bool cancelled) {
  auto const took = std::chrono::duration_cast<std::chrono::microseconds>(clock::now() - c.started);
  if (cancelled) {
    record_attempt(ctx_.gate, ctx_.observer, {c.number, {}, took, true});
    if (i > 0) ctx_.observer.hedge("lost");
  } else {
    auto const outcome = outcome_of(c.summary);
    record_attempt(ctx_.gate, ctx_.observer, {c.number, outcome, took});
    if (i > 0) ctx_.observer.hedge("failed");
    ctx_.log.info("hedge_copy_failed", ctx_.facts.summary(),
                  {{"attempt", c.number},
                   {"error_type", outcome_name(outcome)},
                   {"reason", "another copy is still in flight: waiting for it"}});
  }
  c.runner->drop();
}

std::optional<std::size_t> hedged_attempt::settle_finished(std::size_t launched) {
  for (std::size_t i = 0; i < launched; ++i) {
    auto& c = copies_[i];
    if (c.running || c.settled) continue;
    c.settled = true;
    switch (after_copy(outcome_of(c.summary), ctx_.policy.retry_on, in_flight_)) {
      case race_move::win:
      case race_move::last_failure:
        return i;
      case race_move::wait_for_others:
        account_dropped(c, i, false);
        break;
    }
  }
  return std::nullopt;
}

bool hedged_attempt::send_hedge(std::size_t& launched, clock::time_point deadline) {
  auto const& facts = ctx_.facts;
  // A hedge is a retry sent early: room in the concurrency limit first, then R-7's budget
  // and the breaker permit it the same way.
  concurrency_lane::slot slot;
  auto const permit = ctx_.slots && !(slot = ctx_.slots->take()).held()
                          ? retry_permit{false, error_type::concurrency_limited,
                                         "the concurrency limit is reached: no room for a hedge"}
                          : ctx_.gate.allow_retry();
  if (!permit.granted) {
    ctx_.observer.hedge_suppressed(to_string(permit.refusal));
    ctx_.log.warn("hedge_suppressed", facts.summary(), {{"attempt", sent_ + 1}, {"reason", permit.why}});
    return false;
  }
  auto const number = ++sent_;
  ctx_.log.info("hedge_sent", facts.summary(),
                {{"attempt", number},
                 {"max_attempts", 1 + ctx_.policy.max_retries},
                 // R-10's fields: a hedge waits out its delay instead of a
                 // backoff, and goes while the first copy has no answer yet.
                 {"backoff_ms", static_cast<long long>(plan_.delay.count())},
                 {"error_type", "no_response_yet"},
                 {"hedge", static_cast<unsigned>(launched)},
                 {"delay", to_string(plan_.source)},
                 {"idempotency_key", facts.idempotency_key}});
  launch(launched++, deadline, number, std::move(slot));
  return true;
}

net::awaitable<unsigned> hedged_attempt::end_race(std::size_t answer, std::size_t launched, net::steady_timer& wake) {
  // The others lose: cancelled, and waited for, so no copy outlives the request. A copy's
  // connection goes with its runner's response (drop), closed, never back to the pool.
  for (std::size_t i = 0; i < launched; ++i)
    if (i != answer && copies_[i].running) {
      copies_[i].slot.release(false);  // cut short by the race, not by the dependency's load
      copies_[i].cancel.emit(net::cancellation_type::terminal);
    }
  while (in_flight_ > 0) {
    if (!fresh_) {
      wake.expires_at(clock::time_point::max());
      co_await wake.async_wait(use_tuple);
    }
    fresh_ = false;
  }
  unsigned cancelled = 0;
  for (std::size_t i = 0; i < launched; ++i) {
    auto& c = copies_[i];
    if (i == answer || c.settled) continue;
    c.settled = true;
    account_dropped(c, i, true);
    ++cancelled;
  }
  co_return cancelled;
}

net::awaitable<attempt_summary> hedged_attempt::run(clock::time_point deadline) {
  net::steady_timer wake(co_await net::this_coro::executor);
  wake_ = &wake;
  fresh_ = false;
  in_flight_ = 0;
  for (auto& c : copies_) c.settled = true;
  auto const run_start = clock::now();
  unsigned const first_number = ++sent_;
  unsigned const allowed = hedges_allowed(plan_, ctx_.policy.max_retries, sent_);
  std::size_t launched = 0;
  launch(launched++, deadline, first_number);

  std::optional<std::size_t> answer;
  bool suppressed = false;
  while (!(answer = settle_finished(launched))) {
    auto const due =
        suppressed ? std::nullopt
                   : next_hedge_at(run_start, plan_.delay, static_cast<unsigned>(launched - 1), allowed, deadline);
    if (due && clock::now() >= *due) {
      suppressed = !send_hedge(launched, deadline);
      continue;
    }
    if (fresh_) {
      fresh_ = false;
      continue;
    }
    wake.expires_at(due ? *due : clock::time_point::max());
    co_await wake.async_wait(use_tuple);
  }
  unsigned const cancelled = co_await end_race(*answer, launched, wake);
  wake_ = nullptr;
  answered_ = *answer;
  auto& won = copies_[answered_];
  if (launched > 1) {
    if (answered_ > 0) ctx_.observer.hedge(won.summary.failure ? "failed" : "won");
    ctx_.log.info("hedge_settled", ctx_.facts.summary(),
                  {{"copies", static_cast<unsigned>(launched)},
                   {"answered_by", won.number},
                   {"cancelled", cancelled},
                   {"error_type", outcome_name(outcome_of(won.summary))}});
  }
  attempt_summary out = std::move(won.summary);
  out.hedges = static_cast<unsigned>(launched - 1);
  out.answered_by = static_cast<unsigned>(answered_);
  out.started = won.started;
  co_return out;
}

void hedged_attempt::drop() {
  for (auto& c : copies_)
    if (c.runner) c.runner->drop();
}

}  // namespace rebound::retry
