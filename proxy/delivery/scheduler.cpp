#include "proxy/delivery/scheduler.hpp"

#include "proxy/http/dependency_route.hpp"
#include "proxy/http/forward.hpp"
#include "proxy/http/message_rewrite.hpp"
#include "proxy/http/request_target.hpp"
#include "proxy/retry/classify.hpp"
#include "proxy/retry/decide.hpp"
#include "proxy/store/task_store.hpp"
#include "proxy/upstream/attempt.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/beast/core/string.hpp>

#include <random>

namespace rebound::delivery {
namespace {

namespace bhttp = boost::beast::http;
using wall = store::wall_clock;
using steady = std::chrono::steady_clock;

/// What becomes of a task after one attempt, as decide said it.
struct next_state {
  store::task_status status = store::task_status::pending;
  wall::time_point at{};
  std::string reason;  ///< why it was dead-lettered
};

std::string outcome_name(const retry::attempt_outcome& o) {
  if (o.status) return "http_" + std::to_string(*o.status);
  return std::string(http::to_string(*o.error));
}

/** R-1..R-5 through the one decision: the attempt number is the task's, the deadline is R-3's
    total time counted from when the task was accepted. */
next_state judge(const config::policy& policy, const store::retry_task& task, const retry::attempt_outcome& outcome,
                 std::optional<std::string_view> retry_after, std::mt19937_64& rng) {
  auto const wall_now = wall::now();
  auto const now = steady::now();
  auto const left = task.window_start + policy.total_timeout - wall_now;
  retry::attempt_facts af;
  af.outcome = outcome;
  af.retry_after = retry_after;
  af.attempts = task.attempts - std::min(task.attempts, task.attempts_before) + 1;  // this window's
  af.may_repeat = true;  // every task carries an idempotency key
  af.now = now;
  af.deadline = now + std::max(std::chrono::duration_cast<steady::duration>(left), steady::duration::zero());
  af.wall_now = wall_now;
  af.u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
  auto const d = retry::decide(policy, af);
  if (auto const* go = std::get_if<retry::retry_in>(&d)) return {store::task_status::pending, wall_now + go->wait, {}};
  auto const& s = std::get<retry::stop>(d);
  if (s.reason == retry::stop_reason::final && outcome.status && *outcome.status < 400)
    return {store::task_status::succeeded, wall_now, {}};
  std::string reason = s.reason == retry::stop_reason::final ? outcome_name(outcome) : std::string(to_string(s.reason));
  return {store::task_status::dead_lettered, wall_now, std::move(reason)};
}

/// Counts a delivery under way for as long as it lives.
struct in_flight_slot {
  std::shared_ptr<std::size_t> count;
  explicit in_flight_slot(std::shared_ptr<std::size_t> c) : count(std::move(c)) { ++*count; }
  ~in_flight_slot() { --*count; }
  in_flight_slot(const in_flight_slot&) = delete;
  in_flight_slot& operator=(const in_flight_slot&) = delete;
};

net::awaitable<void> deliver(http::session_context ctx, store::retry_task task, std::string owner,
                             std::shared_ptr<std::size_t> count) {
  in_flight_slot const slot(std::move(count));
  auto const& log = *ctx.log;
  std::string host;
  for (auto const& [name, value] : task.headers)
    if (beast::iequals(name, "Host")) host = value;
  auto parsed = http::parse_request_target(task.method, task.target, host, 1, 11);
  if (!parsed.value) {
    // Only a store written by another program holds such a task: it cannot be sent, so it is kept
    // where a person looks, not dropped.
    store::attempt_log const none{task.id, task.attempts + 1, wall::now(), 0, "bad_request", {}};
    auto [e, ok] = co_await store::async_finish_attempt(*ctx.store, owner, none, store::task_status::dead_lettered,
                                                        wall::now(), use_tuple);
    log.error("dead_lettered", {{"task_id", task.id}, {"reason", "the stored target cannot be parsed"}});
    co_return;
  }
  auto& target = *parsed.value;
  auto route = http::route_request(ctx.cfg(), target, task.method, false);
  http::attach_runtime(route, ctx, target);
  auto const& policy = *route.policy;
  auto& guard = *route.guard;

  // a breaker or budget that says no postpones the attempt; it is not counted, dropped or
  // dead-lettered early.
  std::optional<std::chrono::milliseconds> postpone;
  if (auto const a = guard.admit(); !a.allowed)
    postpone = std::chrono::duration_cast<std::chrono::milliseconds>(a.retry_after);
  else if (task.attempts > 0 && !guard.allow_retry().granted)
    postpone = std::chrono::duration_cast<std::chrono::milliseconds>(policy.backoff.cap);
  if (postpone) {
    auto const until = wall::now() + *postpone;
    auto [e, ok] = co_await store::async_postpone(*ctx.store, owner, task.id, until, use_tuple);
    log.info("task_postponed", {{"task_id", task.id},
                                {"dependency", route.name},
                                {"reason", "budget or circuit breaker (R-7)"},
                                {"next_in_ms", static_cast<long long>(postpone->count())}});
    co_return;
  }

  bhttp::request<bhttp::buffer_body> req;
  req.method_string(task.method);
  req.target(target.origin_form);
  req.version(11);
  for (auto const& [name, value] : task.headers) req.insert(name, value);
  bool const is_head = req.method() == bhttp::verb::head;
  if (!task.body.empty() || (req.method() != bhttp::verb::get && !is_head && req.method() != bhttp::verb::delete_))
    req.content_length(task.body.size());
  auto const key = http::pool_key(target);
  upstream::destination const to{key,   target.connect_host, target.port, route.tls, http::credentials_for(req, route),
                                 true,  nullptr,            std::chrono::milliseconds(0), false};
  auto const started_wall = wall::now();
  auto const started = steady::now();
  auto attempt = co_await upstream::run_attempt(*ctx.pool, to, req, task.body, is_head, started + policy.attempt_timeout);
  auto const took = std::chrono::duration_cast<std::chrono::microseconds>(steady::now() - started);

  retry::attempt_outcome outcome;
  std::optional<std::string_view> retry_after;
  std::string message;
  if (attempt) {
    auto const& h = (*attempt)->response->get();
    outcome.status = h.result_int();
    if (auto it = h.find(bhttp::field::retry_after); it != h.end()) retry_after = it->value();
  } else {
    outcome.error = attempt.error().type;
    message = attempt.error().message;
  }
  guard.record(retry::classify(outcome, retry::retry_on::r4_default()) == retry::verdict::retryable);
  guard.attempt_done({task.attempts + 1, outcome, took});
  auto const next = judge(policy, task, outcome, retry_after, *ctx.rng);
  // The response's body is not wanted: its connection goes with it rather than back to the pool.
  attempt = upstream::attempt_failure{http::error_type::connect_reset, {}};

  store::attempt_log const record{task.id,
                                  task.attempts + 1,
                                  started_wall,
                                  outcome.status.value_or(0),
                                  outcome.error ? std::string(http::to_string(*outcome.error)) : std::string(),
                                  took};
  auto [e, kept] = co_await store::async_finish_attempt(*ctx.store, owner, record, next.status, next.at, use_tuple);
  auto const number = task.attempts + 1;
  log.info("task_attempt", {{"task_id", task.id},
                            {"dependency", route.name},
                            {"attempt", number},
                            {"status", outcome.status.value_or(0)},
                            {"error_type", outcome.error ? http::to_string(*outcome.error) : std::string_view()},
                            {"duration_ms", static_cast<long long>(took.count() / 1000)},
                            {"next", store::to_string(next.status)}});
  if (e || !kept) {
    log.warn("task_lease_lost", {{"task_id", task.id}, {"message", e ? e->message : "another owner took the task"}});
    co_return;
  }
  if (next.status == store::task_status::succeeded)
    log.info("task_delivered", {{"task_id", task.id}, {"dependency", route.name}, {"attempts", number}});
  else if (next.status == store::task_status::dead_lettered) {
    guard.dead_lettered(next.reason);
    log.error("dead_lettered", {{"task_id", task.id},
                                {"dependency", route.name},
                                {"reason", next.reason},
                                {"attempts", number},
                                {"idempotency_key", task.idempotency_key},
                                {"message", message}});
  }
}

}  // namespace

net::awaitable<void> run_scheduler(http::session_context ctx, scheduler_options options) {
  auto const count = std::make_shared<std::size_t>(0);
  auto const executor = co_await net::this_coro::executor;
  net::steady_timer timer(executor);
  bool store_down = false;
  for (;;) {
    if (ctx.sessions->draining()) co_return;  // leases of deliveries cut by the drain expire
    if (ctx.latest) ctx.running = *ctx.latest;
    std::size_t const room = options.max_in_flight > *count ? options.max_in_flight - *count : 0;
    if (room > 0) {
      auto const now = wall::now();
      auto [e, tasks] = co_await store::async_claim(*ctx.store, options.owner, now, now + options.lease, room, use_tuple);
      if (e && !store_down) ctx.log->error("store_unavailable", {{"message", e->message}});
      store_down = static_cast<bool>(e);
      for (auto& t : tasks)
        net::co_spawn(executor, deliver(ctx, std::move(t), options.owner, count), [log = ctx.log](std::exception_ptr x) {
          if (!x) return;
          try {
            std::rethrow_exception(x);
          } catch (const std::exception& ex) {
            log->error("internal_error", {{"where", "delivery"}, {"message", ex.what()}});
          }
        });
      if (!e && tasks.size() == room) continue;  // more may be due at once
    }
    timer.expires_after(options.poll);
    co_await timer.async_wait(use_tuple);
  }
}

}  // namespace rebound::delivery
