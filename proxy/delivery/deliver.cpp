#include "proxy/delivery/delivery_state.hpp"

#include "config/describe.hpp"
#include "config/load.hpp"
#include "proxy/delivery/alert_notice.hpp"
#include "proxy/delivery/task_step.hpp"
#include "proxy/plan/dependency_route.hpp"
#include "proxy/plan/request_plan.hpp"
#include "proxy/wire/framing.hpp"
#include "proxy/plan/request_target.hpp"
#include "proxy/observe/metrics.hpp"
#include "proxy/retry/dependency_guard.hpp"
#include "proxy/retry/loop.hpp"
#include "proxy/retry/step.hpp"
#include "proxy/store/task_store.hpp"
#include "proxy/upstream/attempt.hpp"

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/beast/core/string.hpp>

namespace rebound::delivery {

using namespace boost::asio::experimental::awaitable_operators;
namespace {

namespace bhttp = boost::beast::http;
using steady = std::chrono::steady_clock;

/// A delivery's answer is read to its end (to reuse the connection) only up to this size.
constexpr std::size_t max_settled_body = 1 << 20;

/** The span of a task that ended (observe/trace.hpp, begin_task): from the start of its
    delivery window (the accept, or a replay) to now, parent of its attempts' spans. */
observe::span task_span(const observe::request_trace& trace, const retry::request_facts& facts,
                        const store::retry_task& task, const next_state& judged, const retry::attempt_summary& last) {
  auto s = retry::traced_span(facts, trace.trace, trace.request, trace.parent, task.window_start,
                              observe::span::kind::server);
  s.attributes.push_back({"rebound.task_id", task.id});
  s.attributes.push_back({"rebound.attempts", std::int64_t{task.attempts + 1}});
  if (last.outcome.status) s.attributes.push_back({"http.response.status_code", std::int64_t{*last.outcome.status}});
  if (judged.status != store::task_status::succeeded) {
    s.attributes.push_back({"error.type", judged.reason.empty() ? std::string("exhausted") : judged.reason});
    s.error = true;
    s.message = std::string("the task ended ") + std::string(store::to_string(judged.status));
  }
  return s;
}

/** The policy a task is delivered by: its registered one, else its route's. A registered
    policy that is gone or no longer passes the checks (a newer rebound's rules) leaves the
    route's in place, with a warning: the task is still delivered. */
net::awaitable<std::shared_ptr<const retry::policy>> registered_policy(const runtime::session_context& ctx,
                                                                       delivery_state& state,
                                                                       const store::retry_task& task) {
  if (task.policy_id.empty()) co_return nullptr;
  if (auto it = state.policies.find(task.policy_id); it != state.policies.end()) co_return it->second;
  auto [e, stored] = co_await store::async_get_policy(*ctx.store, task.policy_id, use_tuple);
  std::string problem = e ? e->message : stored ? std::string() : "no policy registered under this id";
  if (stored) {
    try {
      auto p = std::make_shared<const retry::policy>(config::load_policy_text(stored->spec, "policy " + stored->id));
      state.policies.emplace(task.policy_id, p);
      co_return p;
    } catch (const std::exception& x) {
      problem = x.what();
    }
  }
  ctx.log->warn("policy_unusable", {{"task_id", task.id}, {"policy_id", task.policy_id}, {"message", problem}});
  co_return nullptr;
}

/// One delivery of a task: the worker's context, the scheduler's state, the task, and the
/// dependency and policy it goes by.
struct delivery_call {
  const runtime::session_context& ctx;
  delivery_state& state;
  const store::retry_task& task;
  const plan::dependency_route& route;
  const retry::policy& policy;
};

/// Into the store and the log: what one attempt of the task came to (task_step's end_of).
net::awaitable<void> record(const delivery_call& d, const store::attempt_log& attempt, const next_state& judged,
                            const std::string& message) {
  auto const& task = d.task;
  auto const& log = *d.ctx.log;
  auto& state = d.state;
  bool const is_alert = task.policy_id == alert_policy_id;
  auto const end = end_of(judged.status, is_alert);
  if (end.raise_alert) raise_alert(d.ctx, state.options.metrics, task, judged.reason, attempt.number);
  auto [e, kept] = co_await store::async_finish_attempt(*d.ctx.store, state.options.owner, attempt, end.status,
                                                        judged.at, use_tuple);
  log.info("task_attempt", {{"task_id", task.id},
                            {"dependency", d.route.name},
                            {"attempt", attempt.number},
                            {"status", attempt.status},
                            {"error_type", attempt.error_type},
                            {"duration_ms", static_cast<long long>(attempt.duration.count() / 1000)},
                            {"next", store::to_string(end.status)}});
  if (e || !kept) {
    log.warn("task_lease_lost", {{"task_id", task.id}, {"message", e ? e->message : "another owner took the task"}});
    co_return;
  }
  if (!end.ended && state.due_times.size() < max_due_times) {
    state.due_times.push(judged.at);
    if (state.waiting && state.waiting->expiry() > steady::now() + (judged.at - wall::now()))
      state.waiting->cancel();  // the scheduler recomputes its wait with this retry in it
  }
  if (end.ended && state.options.metrics) {
    state.options.metrics->task_ended(d.route.name, retry::to_string(d.policy.context), wall::now() - task.created_at);
    if (is_alert)
      state.options.metrics->alert_notice(end.status == store::task_status::succeeded ? "delivered" : "failed");
  }
  if (end.status == store::task_status::succeeded) {
    log.info("task_delivered", {{"task_id", task.id}, {"dependency", d.route.name}, {"attempts", attempt.number}});
  } else if (end.status == store::task_status::exhausted) {
    log.error("alert_failed", {{"task_id", task.id}, {"reason", judged.reason}, {"attempts", attempt.number}});
  } else if (end.status == store::task_status::dead_lettered) {
    d.route.guard->dead_lettered(judged.reason, retry::to_string(d.policy.context));
    log.error("dead_lettered", {{"task_id", task.id},
                                {"dependency", d.route.name},
                                {"reason", judged.reason},
                                {"attempts", attempt.number},
                                {"idempotency_key", task.idempotency_key},
                                {"message", message}});
  }
}

/// The policy of the dependency a task was accepted for, by name: its route's is not known
/// when its target cannot be parsed.
const retry::policy& policy_named(const config::config& cfg, std::string_view dependency) {
  for (auto const& d : cfg.dependencies)
    if (d.name == dependency) return d.effective;
  return cfg.defaults;
}

/** A task that can never be sent (a target that does not parse, a field no HTTP/1.1 head can
    carry): kept where a person looks, with R-8's alert, instead of dropped or left IN_FLIGHT.
    It ends through record() like any dead letter, so it is counted (dlq_messages_total, and
    the end of its retry step that seed 003's dead-letter rate reads) and alerted on.
    `reason` is a view: a by-value string built in the co_await expression is destroyed twice
    by GCC 12. */
net::awaitable<void> dead_letter_unsendable(const runtime::session_context& ctx, delivery_state& state,
                                            const store::retry_task& task, std::string_view reason) {
  bool const is_alert = task.policy_id == alert_policy_id;
  plan::dependency_route route;
  route.name = task.dependency;
  route.policy = &policy_named(ctx.cfg(), task.dependency);
  route.guard = ctx.guards->find(route.name, *route.policy);
  auto const& policy = is_alert ? alert_policy() : *route.policy;
  store::attempt_log const none{task.id, task.attempts + 1, wall::now(), 0, "bad_request", {}};
  // No retry step ran to its end: this is that end (an alert's is counted by record()).
  if (!is_alert)
    route.guard->ended(none.number - std::min(task.attempts, task.attempts_before), retry::call_end::failure,
                       retry::to_string(policy.context));
  next_state const judged{store::task_status::dead_lettered, wall::now(), "unsendable"};
  std::string const message(reason);
  delivery_call const call{ctx, state, task, route, policy};
  co_await record(call, none, judged, message);
}

/** R-7 and the concurrency limit, before an attempt: a task they hold back waits in the store
    (task_step's postponement_for) and is not counted an attempt. Returns whether it was held
    back; else `slot` holds the dependency's concurrency slot, when it has a limit. */
net::awaitable<bool> postponed(const delivery_call& d, retry::concurrency_lane::slot& slot) {
  auto& guard = *d.route.guard;
  std::optional<held_back> why;
  retry::duration breaker_wait{0};
  if (auto const a = guard.admit(); !a.allowed) {
    why = held_back::breaker_open;
    breaker_wait = a.retry_after;
  } else if (d.task.attempts > 0 && !guard.allow_retry().granted) {
    why = held_back::budget_spent;
  } else if (d.route.slots && !(slot = d.route.slots->take()).held()) {
    why = held_back::concurrency_limit;
    guard.limited();
  }
  if (!why) co_return false;
  double const u = *why == held_back::concurrency_limit ? std::uniform_real_distribution<>(0, 1)(*d.ctx.rng) : 0.0;
  auto const wait = postponement_for(*why, breaker_wait, d.task.attempts, d.policy, u);
  auto [e, ok] =
      co_await store::async_postpone(*d.ctx.store, d.state.options.owner, d.task.id, wall::now() + wait, use_tuple);
  d.ctx.log->info("task_postponed", {{"task_id", d.task.id},
                                     {"dependency", d.route.name},
                                     {"reason", to_string(*why)},
                                     {"next_in_ms", static_cast<long long>(wait.count())}});
  co_return true;
}

/// The stored call as an HTTP/1.1 request, its body framed whole.
http::request_message<bhttp::buffer_body> request_of(const store::retry_task& task,
                                                     const plan::request_target& target) {
  http::request_message<bhttp::buffer_body> req;
  req.method_string(task.method);
  req.target(target.origin_form);
  req.version(11);
  for (auto const& [name, value] : task.headers) req.insert(name, value);
  http::frame_whole_body(req, task.body.size());
  return req;
}

/** A task's attempts share one trace (observe/trace.hpp), each its own span sent upstream in
    `req`'s traceparent, under the caller's span when the handed-over call came with one. */
std::pair<observe::request_trace, observe::span_id> trace_attempt(const runtime::session_context& ctx,
                                                                  const store::retry_task& task,
                                                                  const retry::request_facts& facts,
                                                                  http::request_message<bhttp::buffer_body>& req) {
  observe::request_trace trace;
  observe::span_id attempt_span{};
  if (!ctx.tracer) return {trace, attempt_span};
  trace = ctx.tracer->begin_task(
      facts.traceparent, task.id,
      std::chrono::duration_cast<std::chrono::milliseconds>(task.window_start.time_since_epoch()).count(), *ctx.rng);
  if (trace.sampled) {
    attempt_span = observe::tracer::new_span_id(*ctx.rng);
    req.set("traceparent", observe::format_traceparent(trace.trace, attempt_span, true));
  }
  return {trace, attempt_span};
}

/** One attempt of the task, judged by the retry step (R-1..R-5) like a request's, and
    recorded. R-3's total time and R-2's count run from the window's start: the accept, or the
    replay. */
net::awaitable<void> attempt_task(const delivery_call& d, const plan::request_target& target,
                                  retry::concurrency_lane::slot& slot) {
  auto const& [ctx, state, task, route, policy] = d;
  auto req = request_of(task, target);
  plan::list_view const head(task.headers);
  auto const key = plan::pool_key(target, route.tls);
  auto const to = plan::destination_of(route, target, key, head.find("Authorization").count > 0);
  // The one request plan over the stored head: the caller's correlation id, else the task's
  // id; the key the task was stored with, which lets every delivery go again. For a
  // delivery it refuses nothing (no caller's deadline is read; the key was checked when the
  // call was stored).
  plan::request_plan planned;
  plan::request_in const in{plan::door::delivery, route,       target,
                            req.method(),         task.method, *ctx.rng,
                            steady::now(),        task.id,     task.idempotency_key};
  (void)plan::plan_request(planned, head, in);
  auto const& facts = planned.facts;
  auto const started_wall = wall::now();
  auto const started = steady::now();
  auto const left = task.window_start + policy.total_timeout - started_wall;
  notice_observer notice(*route.guard);
  bool const is_alert = task.policy_id == alert_policy_id;
  retry::attempt_observer& observer = is_alert ? static_cast<retry::attempt_observer&>(notice) : *route.guard;
  retry::retry_step step(
      {policy, facts, *ctx.log, *ctx.rng, *route.guard, observer, false},
      started + std::max(std::chrono::duration_cast<steady::duration>(left), steady::duration::zero()),
      task.attempts - std::min(task.attempts, task.attempts_before));
  auto const [trace, attempt_span] = trace_attempt(ctx, task, facts, req);
  auto const deadline = started + policy.attempt_timeout;
  upstream::outgoing_request const out{req, task.body, req.method() == bhttp::verb::head};
  auto attempt = co_await upstream::run_attempt(*ctx.pool, to, out, deadline);
  auto const took = std::chrono::duration_cast<std::chrono::microseconds>(steady::now() - started);
  slot.release(retry::measures_load(attempt ? std::nullopt : std::optional(attempt.error().type)));

  retry::attempt_summary summary;
  std::string retry_after;  // the summary views it
  std::string message;
  if (attempt) {
    auto const& h = (*attempt)->response->fields();
    summary.outcome.status = (*attempt)->response->get().result_int();
    // Retry-After only: a layer below that gave up for now does not end a durable task,
    // which is retried over hours (R-3's webhook table), not by a caller waiting on it.
    retry::read_answer_head(
        [&h](auto&& visit) {
          for (auto const& f : h) visit(f.name_string(), f.value());
        },
        summary, false);
    if (summary.retry_after) {
      retry_after = *summary.retry_after;  // the answer is read on below, its fields reused
      summary.retry_after = retry_after;
    }
    // Nobody reads the answer on; reading it lets the next delivery reuse the connection.
    upstream::pool_slot const back{*ctx.pool, key};
    co_await upstream::settle(back, **attempt, max_settled_body, deadline);
  } else {
    message = attempt.error().message;
    summary.failure = std::move(attempt.error());
  }
  step.attempt_made();
  auto const next = step.after(summary, started, {steady::now(), wall::now()}, false);
  if (trace.sampled) {
    // The backoff before it was waited in the store, maybe by another instance: not known here.
    auto s = retry::traced_attempt(facts, trace.trace, attempt_span, trace.request, started_wall, task.attempts + 1,
                                   summary, std::nullopt);
    s.attributes.push_back({"rebound.task_id", task.id});
    ctx.tracer->record(std::move(s));
  }
  auto const judged = judge(next, summary, policy, wall::now());
  store::attempt_log const attempt_record{
      task.id,
      task.attempts + 1,
      started_wall,
      summary.outcome.status.value_or(0),
      summary.failure ? std::string(http::to_string(summary.failure->type)) : std::string(),
      took};
  co_await record(d, attempt_record, judged, message);
  if (trace.sampled && judged.status != store::task_status::pending)
    ctx.tracer->record(task_span(trace, facts, task, judged, summary));
}

/// A claimed task: where it goes and by which policy, then postponed or attempted.
net::awaitable<void> deliver_once(runtime::session_context ctx, const store::retry_task& task,
                                  std::shared_ptr<delivery_state> state) {
  std::string host;
  for (auto const& [name, value] : task.headers)
    if (beast::iequals(name, "Host")) host = value;
  auto parsed = plan::parse_request_target(task.method, task.target, host, 1, 11);
  if (!parsed.value) {
    // Only a store written by another program holds such a task.
    co_await dead_letter_unsendable(ctx, *state, task, "the stored target cannot be parsed");
    co_return;
  }
  auto& target = *parsed.value;
  auto route = plan::route_request(ctx.cfg(), target, task.method, false);
  plan::attach_runtime(route, ctx, target);
  bool const is_alert = task.policy_id == alert_policy_id;
  std::shared_ptr<const retry::policy> registered;
  if (!is_alert) registered = co_await registered_policy(ctx, *state, task);  // not inside ?: (GCC 12)
  auto const& policy = is_alert ? alert_policy() : registered ? *registered : *route.policy;
  delivery_call const call{ctx, *state, task, route, policy};
  retry::concurrency_lane::slot slot;
  if (co_await postponed(call, slot)) co_return;
  co_await attempt_task(call, target, slot);
}

/** Moves the task's lease on while its delivery runs (a third of the lease at a time): a slow
    instance (a long connect, a slow store) must not lose the task mid-attempt to another,
    which would deliver it twice. Runs until the delivery ends and cancels it. */
net::awaitable<void> keep_lease(const runtime::session_context& ctx, const std::string& id,
                                const std::shared_ptr<delivery_state>& state) {
  net::steady_timer timer(co_await net::this_coro::executor);
  auto const lease = state->options.lease;
  bool lost = false;
  for (;;) {
    // Once lost, nothing more to renew: wait for the delivery to end (its finish is refused).
    timer.expires_after(lost ? steady::duration::max() / 2 : steady::duration(lease / 3));
    if (auto [ec] = co_await timer.async_wait(use_tuple); ec) co_return;
    auto [e, kept] =
        co_await store::async_renew_lease(*ctx.store, state->options.owner, id, wall::now() + lease, use_tuple);
    if (!e && !kept) {
      lost = true;
      ctx.log->warn("task_lease_lost", {{"task_id", id}, {"message", "another owner took the task mid-delivery"}});
    }
  }
}

/** One delivery. One that throws (Beast refuses a stored field of 64 KiB or more while the
    request is built) would throw again at every claim: it is a final failure, dead-lettered
    with R-8's alert, not a task IN_FLIGHT forever. Never throws itself: keep_lease beside it
    ends only when it ends. */
net::awaitable<void> deliver_or_dead_letter(const runtime::session_context& ctx, const store::retry_task& task,
                                            const std::shared_ptr<delivery_state>& state) {
  std::string why;
  try {
    co_await deliver_once(ctx, task, state);
    co_return;
  } catch (const std::exception& e) {
    why = std::string("the stored call cannot be sent: ") + e.what();
  }
  co_await dead_letter_unsendable(ctx, *state, task, why);
}

}  // namespace

net::awaitable<void> deliver(runtime::session_context ctx, store::retry_task task,
                             std::shared_ptr<delivery_state> state) {
  in_flight_slot const slot(state);
  auto once = deliver_or_dead_letter(ctx, task, state);
  auto lease = keep_lease(ctx, task.id, state);
  co_await (std::move(once) || std::move(lease));
}

}  // namespace rebound::delivery
