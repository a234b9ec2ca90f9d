#include "proxy/delivery/scheduler.hpp"

#include "config/describe.hpp"
#include "config/load.hpp"
#include "proxy/http/dependency_route.hpp"
#include "proxy/http/forward.hpp"
#include "proxy/http/session_registry.hpp"
#include "proxy/retry/backoff.hpp"
#include "proxy/retry/dependency_guard.hpp"
#include "proxy/http/message_rewrite.hpp"
#include "proxy/http/request_target.hpp"
#include "proxy/idempotency/key.hpp"
#include "proxy/observe/json.hpp"
#include "proxy/observe/metrics.hpp"
#include "proxy/retry/loop.hpp"
#include "proxy/retry/step.hpp"
#include "proxy/store/task_store.hpp"
#include "proxy/upstream/attempt.hpp"

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/beast/core/string.hpp>

#include <functional>
#include <queue>
#include <random>
#include <unordered_map>

namespace rebound::delivery {

using namespace boost::asio::experimental::awaitable_operators;
namespace {

namespace bhttp = boost::beast::http;
using wall = store::wall_clock;
using steady = std::chrono::steady_clock;

/// A delivery's answer is read to its end (to reuse the connection) only up to this size.
constexpr std::size_t max_settled_body = 1 << 20;

/// What becomes of a task after one attempt, as decide said it.
struct next_state {
  store::task_status status = store::task_status::pending;
  wall::time_point at{};
  std::string reason;  ///< why it was dead-lettered
};

/** What the retry step (R-1..R-5, the breaker's record, the logs) said of one attempt, as the
    task's next state: the wait it would have waited becomes the time stored for the next
    attempt. */
next_state judge(const retry::next_step& next, const retry::attempt_summary& summary, const config::policy& policy) {
  auto const wall_now = wall::now();
  if (next.retry) return {store::task_status::pending, wall_now + next.wait, {}};
  if (!next.stopped)  // the step asks no budget for delivery, so only a drain could say this
    return {store::task_status::pending, wall_now + policy.backoff.cap, {}};
  auto const outcome = summary.failure ? retry::attempt_outcome{std::nullopt, summary.failure->type} : summary.outcome;
  if (*next.stopped == retry::stop_reason::final && outcome.status && *outcome.status < 400)
    return {store::task_status::succeeded, wall_now, {}};
  std::string reason =
      *next.stopped == retry::stop_reason::final ? retry::outcome_name(outcome) : std::string(to_string(*next.stopped));
  return {store::task_status::dead_lettered, wall_now, std::move(reason)};
}

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

/// Retry times a scheduler keeps to wake at (a few hundred KiB at most).
constexpr std::size_t max_due_times = 16384;

/// What the scheduler and its deliveries share, on worker 0's thread.
struct delivery_state {
  scheduler_options options;
  std::size_t in_flight = 0;
  /// Set while the scheduler waits for deliveries to end before it claims more; they wake it.
  net::steady_timer* waiting_for_room = nullptr;
  /// The scheduler's timer while it waits for anything (its poll); null otherwise.
  net::steady_timer* waiting = nullptr;
  /** When the retries this process scheduled are due, soonest first: the scheduler claims at
      each, not at its next poll (which, on a fleet's shared store, is a second). Only the soonest
      was kept before, so every other retry waited for a poll: due -> attempt p99 1.8-2 s on
      PostgreSQL. Bounded: past max_due_times a retry waits for the poll. */
  std::priority_queue<wall::time_point, std::vector<wall::time_point>, std::greater<>> due_times;
  /// Registered policies by id, read from the store once: they never change under their id.
  std::unordered_map<std::string, std::shared_ptr<const config::policy>> policies;
  std::minstd_rand poll_draws;
  /// Another instance's commit made tasks due (its NOTIFY) since the last claim.
  bool notified = false;
  /// A commit of this process made tasks due (an accept, a replay): claimed at once, with no
  /// gap and no poll in between (seed 001: scheduling overhead under 5 ms an attempt).
  bool local_due = false;
  steady::time_point last_claim{};
  /// The gap now: options.notified_gap, doubled (to the poll) while woken claims find nothing.
  steady::duration notified_gap{};
};

/// The next poll's wait: uniform in [3/4, 5/4] of `poll`, as the options say.
steady::duration next_poll(std::chrono::milliseconds poll, std::minstd_rand& draws) {
  std::uniform_int_distribution<std::int64_t> pick(poll.count() * 3 / 4, poll.count() * 5 / 4);
  return std::chrono::milliseconds(pick(draws));
}

/// Counts a delivery under way for as long as it lives; the last of a batch to end wakes the
/// scheduler, so a fast upstream is not held to one batch per poll interval.
struct in_flight_slot {
  std::shared_ptr<delivery_state> state;
  explicit in_flight_slot(std::shared_ptr<delivery_state> s) : state(std::move(s)) { ++state->in_flight; }
  ~in_flight_slot() {
    --state->in_flight;
    if (state->waiting_for_room && state->in_flight <= state->options.max_in_flight / 2) {
      state->waiting_for_room->cancel();
      state->waiting_for_room = nullptr;
    }
  }
  in_flight_slot(const in_flight_slot&) = delete;
  in_flight_slot& operator=(const in_flight_slot&) = delete;
};

/// R-3's webhook table, 24 h: how an alert notice is retried, whatever the route of its URL says.
const config::policy& alert_policy() {
  static const config::policy p = [] {
    config::policy a;
    a.context = config::context_kind::webhook;
    a.max_retries = config::builtin_max_retries(a.context);
    a.schedule = config::builtin_schedule(a.context);
    a.total_timeout = config::builtin_total_timeout(a.context);
    return a;
  }();
  return p;
}

/** The policy a task is delivered by: its registered one, else its route's. A registered
    policy that is gone or no longer passes the checks (a newer rebound's rules) leaves the
    route's in place, with a warning: the task is still delivered. */
net::awaitable<std::shared_ptr<const config::policy>> registered_policy(const http::session_context& ctx,
                                                                        delivery_state& state,
                                                                        const store::retry_task& task) {
  if (task.policy_id.empty()) co_return nullptr;
  if (auto it = state.policies.find(task.policy_id); it != state.policies.end()) co_return it->second;
  auto [e, stored] = co_await store::async_get_policy(*ctx.store, task.policy_id, use_tuple);
  std::string problem = e ? e->message : stored ? std::string() : "no policy registered under this id";
  if (stored) {
    try {
      auto p = std::make_shared<const config::policy>(config::load_policy_text(stored->spec, "policy " + stored->id));
      state.policies.emplace(task.policy_id, p);
      co_return p;
    } catch (const std::exception& x) {
      problem = x.what();
    }
  }
  ctx.log->warn("policy_unusable", {{"task_id", task.id}, {"policy_id", task.policy_id}, {"message", problem}});
  co_return nullptr;
}

/** A dead letter's notice for alert.webhook, as a task of its own: durable, retried on R-3's
    webhook table with one idempotency key, and EXHAUSTED at its end rather than dead-lettered. */
std::optional<store::retry_task> alert_task(const http::session_context& ctx, const store::retry_task& dead,
                                            std::string_view reason, unsigned attempts) {
  auto const& url = ctx.cfg().alert_webhook;
  auto key = idempotency::new_key();
  if (url.empty() || !key) return std::nullopt;
  auto const authority =
      url.substr(7, url.find('/', 7) == std::string::npos ? std::string::npos : url.find('/', 7) - 7);
  std::string body;
  observe::json_writer w(body);
  w.open_object().field("event", "dead_lettered").field("task_id", dead.id).field("dependency", dead.dependency);
  w.field("method", dead.method).field("reason", reason).field("attempts", attempts);
  w.field("idempotency_key", dead.idempotency_key).field("dead_lettered_at", wall::now());
  w.field("task", std::string(ctx.admin_base) + "/retry-tasks/" + dead.id).close_object();
  body += '\n';
  auto notice = store::new_task({"alert",
                          "POST",
                          url,
                          {{"Host", authority}, {"Content-Type", "application/json"}},
                          std::move(body),
                          std::string(alert_policy_id),
                          std::string(ctx.cfg().defaults.idempotency.header),
                          std::move(*key)});
  if (notice) notice->beyond_max_size = true;
  return notice;
}

/** raises the notice of a dead letter, stored next to the dead letter's record so both
    usually share one commit (a crash between the two can lose the notice, never the dead
    letter). A notice that cannot be made or stored is never dropped in silence: it is logged
    `alert_failed` and counted lost. */
void raise_alert(const http::session_context& ctx, const delivery_state& state, const store::retry_task& dead,
                 std::string_view reason, unsigned attempts) {
  if (ctx.cfg().alert_webhook.empty()) return;
  auto lost = [log = ctx.log, metrics = state.options.metrics, id = dead.id](const std::string& why) {
    log->error("alert_failed", {{"task_id", id}, {"reason", "not_stored"}, {"message", why}});
    if (metrics) metrics->alert_notice("lost");
  };
  auto notice = alert_task(ctx, dead, reason, attempts);
  if (!notice) return lost("no idempotency key or id could be made for the notice (the CSPRNG failed)");
  ctx.store->submit_accept(std::move(*notice), [lost](std::optional<store::store_error> e, bool) {
    if (e) lost(e->message);
  });
}

/** An alert notice's attempts are attempts to its URL's dependency like any other, but its
    end is rebound's own business: counted in alert_notices_total, never in the
    retry_request_attempts that seed 003's dead-letter rate is computed from. */
class notice_observer final : public retry::attempt_observer {
 public:
  explicit notice_observer(retry::attempt_observer& dependency) : dependency_(dependency) {}
  void attempt_done(const retry::attempt_report& r) override { dependency_.attempt_done(r); }
  void retry_scheduled(retry::duration wait) override { dependency_.retry_scheduled(wait); }
  void exhausted() override { dependency_.exhausted(); }
  void declined(std::string_view reason) override { dependency_.declined(reason); }

 private:
  retry::attempt_observer& dependency_;
};

/// One delivery of a task: the worker's context, the scheduler's state, the task, and the
/// dependency and policy it goes by.
struct delivery_call {
  const http::session_context& ctx;
  delivery_state& state;
  const store::retry_task& task;
  const http::dependency_route& route;
  const config::policy& policy;
};

/// Into the store and the log: what one attempt of the task came to.
net::awaitable<void> record(const delivery_call& d, const store::attempt_log& attempt, const next_state& judged,
                            const std::string& message) {
  auto const& ctx = d.ctx;
  auto& state = d.state;
  auto const& task = d.task;
  auto const& route = d.route;
  auto const& policy = d.policy;
  auto const& log = *ctx.log;
  bool const is_alert = task.policy_id == alert_policy_id;
  // An alert that ran out is not dead-lettered: a failing alert must not raise another.
  auto const final_status =
      judged.status == store::task_status::dead_lettered && is_alert ? store::task_status::exhausted : judged.status;
  if (final_status == store::task_status::dead_lettered) raise_alert(ctx, state, task, judged.reason, attempt.number);
  auto [e, kept] = co_await store::async_finish_attempt(*ctx.store, state.options.owner, attempt, final_status,
                                                        judged.at, use_tuple);
  log.info("task_attempt", {{"task_id", task.id},
                            {"dependency", route.name},
                            {"attempt", attempt.number},
                            {"status", attempt.status},
                            {"error_type", attempt.error_type},
                            {"duration_ms", static_cast<long long>(attempt.duration.count() / 1000)},
                            {"next", store::to_string(final_status)}});
  if (e || !kept) {
    log.warn("task_lease_lost", {{"task_id", task.id}, {"message", e ? e->message : "another owner took the task"}});
    co_return;
  }
  auto const ended = final_status != store::task_status::pending;
  if (!ended && state.due_times.size() < max_due_times) {
    state.due_times.push(judged.at);
    if (state.waiting && state.waiting->expiry() > steady::now() + (judged.at - wall::now()))
      state.waiting->cancel();  // the scheduler recomputes its wait with this retry in it
  }
  if (ended && state.options.metrics) {
    state.options.metrics->task_ended(route.name, config::to_string(policy.context), wall::now() - task.created_at);
    if (is_alert)
      state.options.metrics->alert_notice(final_status == store::task_status::succeeded ? "delivered" : "failed");
  }
  if (final_status == store::task_status::succeeded) {
    log.info("task_delivered", {{"task_id", task.id}, {"dependency", route.name}, {"attempts", attempt.number}});
  } else if (final_status == store::task_status::exhausted) {
    log.error("alert_failed", {{"task_id", task.id}, {"reason", judged.reason}, {"attempts", attempt.number}});
  } else if (final_status == store::task_status::dead_lettered) {
    route.guard->dead_lettered(judged.reason, config::to_string(policy.context));
    log.error("dead_lettered", {{"task_id", task.id},
                                {"dependency", route.name},
                                {"reason", judged.reason},
                                {"attempts", attempt.number},
                                {"idempotency_key", task.idempotency_key},
                                {"message", message}});
  }
}

/// The policy of the dependency a task was accepted for, by name: its route's is not known
/// when its target cannot be parsed.
const config::policy& policy_named(const config::config& cfg, std::string_view dependency) {
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
net::awaitable<void> dead_letter_unsendable(const http::session_context& ctx, delivery_state& state,
                                            const store::retry_task& task, std::string_view reason) {
  bool const is_alert = task.policy_id == alert_policy_id;
  http::dependency_route route;
  route.name = task.dependency;
  route.policy = &policy_named(ctx.cfg(), task.dependency);
  route.guard = ctx.guards->find(route.name, *route.policy);
  auto const& policy = is_alert ? alert_policy() : *route.policy;
  store::attempt_log const none{task.id, task.attempts + 1, wall::now(), 0, "bad_request", {}};
  // No retry step ran to its end: this is that end (an alert's is counted by record()).
  if (!is_alert)
    route.guard->ended(none.number - std::min(task.attempts, task.attempts_before), retry::call_end::failure,
                       config::to_string(policy.context));
  next_state const judged{store::task_status::dead_lettered, wall::now(), "unsendable"};
  std::string const message(reason);
  delivery_call const call{ctx, state, task, route, policy};
  co_await record(call, none, judged, message);
}

net::awaitable<void> deliver_once(http::session_context ctx, const store::retry_task& task,
                                  std::shared_ptr<delivery_state> state) {
  auto const& owner = state->options.owner;
  auto const& log = *ctx.log;
  std::string host;
  for (auto const& [name, value] : task.headers)
    if (beast::iequals(name, "Host")) host = value;
  auto parsed = http::parse_request_target(task.method, task.target, host, 1, 11);
  if (!parsed.value) {
    // Only a store written by another program holds such a task.
    co_await dead_letter_unsendable(ctx, *state, task, "the stored target cannot be parsed");
    co_return;
  }
  auto& target = *parsed.value;
  auto route = http::route_request(ctx.cfg(), target, task.method, false);
  http::attach_runtime(route, ctx, target);
  bool const is_alert = task.policy_id == alert_policy_id;
  std::shared_ptr<const config::policy> registered;
  if (!is_alert) registered = co_await registered_policy(ctx, *state, task);  // not inside ?: (GCC 12)
  auto const& policy = is_alert ? alert_policy() : registered ? *registered : *route.policy;
  auto& guard = *route.guard;

  // a breaker or budget that says no postpones the attempt; it is not counted, dropped or
  // dead-lettered early.
  std::optional<std::chrono::milliseconds> postpone;
  if (auto const a = guard.admit(); !a.allowed)
    postpone = std::chrono::duration_cast<std::chrono::milliseconds>(a.retry_after);
  else if (task.attempts > 0 && !guard.allow_retry().granted)
    postpone = std::chrono::duration_cast<std::chrono::milliseconds>(policy.backoff.cap);
  // Issue 51: a dependency at its concurrency limit gets the task later, after the task's
  // own backoff; it is not an attempt and does not bring the dead letter nearer.
  retry::concurrency_lane::slot slot;
  bool const limited = !postpone && route.slots && !(slot = route.slots->take()).held();
  if (limited)
    postpone = std::chrono::duration_cast<std::chrono::milliseconds>(retry::full_jitter(
        task.attempts + 1, policy.backoff.base, policy.backoff.cap, std::uniform_real_distribution<>(0, 1)(*ctx.rng)));
  if (postpone) {
    if (limited) guard.limited();
    auto const until = wall::now() + *postpone;
    auto [e, ok] = co_await store::async_postpone(*ctx.store, owner, task.id, until, use_tuple);
    log.info("task_postponed", {{"task_id", task.id},
                                {"dependency", route.name},
                                {"reason", limited ? "concurrency limit" : "budget or circuit breaker (R-7)"},
                                {"next_in_ms", static_cast<long long>(postpone->count())}});
    co_return;
  }

  http::request_message<bhttp::buffer_body> req;
  req.method_string(task.method);
  req.target(target.origin_form);
  req.version(11);
  for (auto const& [name, value] : task.headers) req.insert(name, value);
  bool const is_head = req.method() == bhttp::verb::head;
  http::frame_whole_body(req, task.body.size());
  auto const key = http::pool_key(target, route.tls);
  auto const to = http::destination_of(route, target, key, req);

  retry::request_facts facts;
  facts.may_retry = true;  // every task carries an idempotency key
  facts.dependency = route.name;
  facts.method = task.method;
  http::describe_target(facts, target, route.tls != nullptr);
  // A copy: a traced attempt replaces the traceparent field a correlation id may be read from.
  std::string const correlation(http::correlation_id_of(req));
  facts.correlation_id = correlation.empty() ? std::string_view(task.id) : std::string_view(correlation);
  facts.idempotency_key = task.idempotency_key;
  auto const started_wall = wall::now();
  auto const started = steady::now();
  // R-3's total time and R-2's count run from the window's start: the accept, or the replay.
  auto const left = task.window_start + policy.total_timeout - started_wall;
  notice_observer notice(guard);
  retry::attempt_observer& observer = is_alert ? static_cast<retry::attempt_observer&>(notice) : guard;
  retry::retry_step step(
      {policy, facts, log, *ctx.rng, guard, observer, false},
      started + std::max(std::chrono::duration_cast<steady::duration>(left), steady::duration::zero()),
      task.attempts - std::min(task.attempts, task.attempts_before));
  // Traced (observe/trace.hpp): a task's attempts share one trace, each its own span sent
  // upstream, under the caller's span when the handed-over call came with a traceparent.
  observe::request_trace trace;
  observe::span_id attempt_span{};
  if (ctx.tracer)
    trace = ctx.tracer->begin_task(
        http::traceparent_of(req), task.id,
        std::chrono::duration_cast<std::chrono::milliseconds>(task.window_start.time_since_epoch()).count(), *ctx.rng);
  if (trace.sampled) {
    attempt_span = observe::tracer::new_span_id(*ctx.rng);
    req.set("traceparent", observe::format_traceparent(trace.trace, attempt_span, true));
  }
  auto const deadline = started + policy.attempt_timeout;
  upstream::outgoing_request const out{req, task.body, is_head};
  auto attempt = co_await upstream::run_attempt(*ctx.pool, to, out, deadline);
  auto const took = std::chrono::duration_cast<std::chrono::microseconds>(steady::now() - started);
  slot.release(retry::measures_load(attempt ? std::nullopt : std::optional(attempt.error().type)));

  retry::attempt_summary summary;
  std::string retry_after;  // the summary views it
  std::string message;
  if (attempt) {
    auto const& h = (*attempt)->response->get();
    summary.outcome.status = h.result_int();
    if (auto it = h.find(bhttp::field::retry_after); it != h.end()) summary.retry_after = retry_after = it->value();
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
  auto const judged = judge(next, summary, policy);
  store::attempt_log const attempt_record{
      task.id,
      task.attempts + 1,
      started_wall,
      summary.outcome.status.value_or(0),
      summary.failure ? std::string(http::to_string(summary.failure->type)) : std::string(),
      took};
  delivery_call const call{ctx, *state, task, route, policy};
  co_await record(call, attempt_record, judged, message);
  if (trace.sampled && judged.status != store::task_status::pending)
    ctx.tracer->record(task_span(trace, facts, task, judged, summary));
}

/** Moves the task's lease on while its delivery runs (a third of the lease at a time): a slow
    instance (a long connect, a slow store) must not lose the task mid-attempt to another,
    which would deliver it twice. Runs until the delivery ends and cancels it. */
net::awaitable<void> keep_lease(const http::session_context& ctx, const std::string& id,
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
net::awaitable<void> deliver_or_dead_letter(const http::session_context& ctx, const store::retry_task& task,
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

net::awaitable<void> deliver(http::session_context ctx, store::retry_task task, std::shared_ptr<delivery_state> state) {
  in_flight_slot const slot(state);
  auto once = deliver_or_dead_letter(ctx, task, state);
  auto lease = keep_lease(ctx, task.id, state);
  co_await (std::move(once) || std::move(lease));
}

}  // namespace

net::awaitable<void> run_scheduler(http::session_context ctx, scheduler_options options) {
  auto const state = std::make_shared<delivery_state>();
  state->options = std::move(options);
  state->poll_draws.seed(static_cast<std::minstd_rand::result_type>(state->options.seed));
  state->notified_gap = state->options.notified_gap;
  auto const& opts = state->options;
  auto const executor = co_await net::this_coro::executor;
  net::steady_timer timer(executor);
  // Tasks another instance made due (a shared store's NOTIFY): claim now, not at the poll.
  ctx.store->set_due_listener([executor, state](store::due_from from) {
    net::post(executor, [state, from] {
      (from == store::due_from::local ? state->local_due : state->notified) = true;
      if (state->waiting) state->waiting->cancel();
    });
  });
  bool store_down = false;
  auto next_count = steady::now();
  auto next_housekeeping = steady::now();
  for (;;) {
    if (ctx.sessions->draining()) break;  // leases of deliveries cut by the drain expire
    if (ctx.latest) ctx.running = *ctx.latest;
    if (steady::now() >= next_housekeeping) {
      next_housekeeping = steady::now() + opts.count_every;
      // store.retention: ended tasks go in batches, each its own commit, so deliveries and
      // accepts go on between them.
      auto const before = wall::now() - ctx.cfg().store.retention;
      for (;;) {
        auto [pe, purged] = co_await store::async_purge(*ctx.store, before, opts.purge_batch, use_tuple);
        if (pe || purged < opts.purge_batch || ctx.sessions->draining()) break;
      }
      // Idempotency keys and event ids of the inbound side whose TTL ran out (R-6's windows).
      for (;;) {
        auto [ke, purged] = co_await store::async_purge_keys(*ctx.store, wall::now(), opts.purge_batch, use_tuple);
        if (ke || purged < opts.purge_batch || ctx.sessions->draining()) break;
      }
    }
    if (opts.metrics && steady::now() >= next_count) {
      next_count = steady::now() + opts.count_every;
      auto [ce, counts] = co_await store::async_counts(*ctx.store, use_tuple);
      // A count answered means the database was reached, so its id is known.
      auto const store_id = ctx.store->identity().value_or("");
      if (!ce && !store_id.empty())
        for (std::size_t i = 0; i < counts.size(); ++i)
          opts.metrics->set_tasks(store_id, store::to_string(static_cast<store::task_status>(i)), counts[i]);
      auto const now = wall::now();
      auto const day_ago = now - std::chrono::hours(24);
      auto [be, backlog] = co_await store::async_backlog(*ctx.store, day_ago, use_tuple);
      if (!be && !store_id.empty())
        opts.metrics->set_backlog(store_id, backlog.started_before,
                                  backlog.oldest ? std::max(now - *backlog.oldest, wall::duration::zero())
                                                 : wall::duration::zero());
      opts.metrics->set_store_up(!ce && !be && !ctx.store->unavailable());
    }
    std::size_t const room = opts.max_in_flight - std::min(opts.max_in_flight, state->in_flight);
    bool full = false;
    auto taken_until = wall::now();  // retries due by then are claimed (or wait for room)
    if (room > 0) {
      bool const notified = state->notified;
      // Made due here (an accept, or a retry this process scheduled): claimed now. Only a wake
      // that is another instance's NOTIFY alone waits for the gap.
      bool const own = std::exchange(state->local_due, false) ||
                       (!state->due_times.empty() && state->due_times.top() <= wall::now());
      if (notified && !own && steady::now() - state->last_claim < state->notified_gap) {
        // Every commit of the fleet wakes every instance: at once, 50 instances made 2,400
        // claims a second to take 100 tasks. A claim taken since the NOTIFY would have found
        // the task, so a woken instance claims at most once a gap.
        timer.expires_at(state->last_claim + state->notified_gap);
        state->waiting = &timer;  // a commit of this process's own cuts the gap short
        co_await timer.async_wait(use_tuple);
        state->waiting = nullptr;
        state->local_due = false;  // the claim below takes it
      }
      state->notified = false;
      state->last_claim = steady::now();
      auto const now = taken_until = wall::now();
      auto [e, tasks] = co_await store::async_claim(*ctx.store, opts.owner, now, now + opts.lease, room, use_tuple);
      // A store that says it is unavailable (PostgreSQL still connecting at start, or gone)
      // logged that itself, once (store_connected / store_unavailable): only a failure the
      // store did not explain is logged here, so a healthy start logs no error.
      if (e && !store_down && !ctx.store->unavailable()) ctx.log->error("store_unavailable", {{"message", e->message}});
      store_down = static_cast<bool>(e);
      // The others took what the NOTIFY announced: this instance answers the next ones later
      // (up to its poll), and at once again when a woken claim finds work.
      if (notified && !e)
        state->notified_gap = tasks.empty() ? std::min<steady::duration>(state->notified_gap * 2, opts.poll)
                                            : steady::duration(opts.notified_gap);
      full = !e && tasks.size() == room;  // more may be due at once
      for (auto& t : tasks)
        net::co_spawn(executor, deliver(ctx, std::move(t), state), [log = ctx.log](std::exception_ptr x) {
          if (!x) return;
          try {
            std::rethrow_exception(x);
          } catch (const std::exception& ex) {
            log->error("internal_error", {{"where", "delivery"}, {"message", ex.what()}});
          }
        });
    }
    auto wait = next_poll(opts.poll, state->poll_draws);
    // Those due by the claim above were taken by it (or by another instance); with no room, the
    // claim that follows the room's return takes them.
    while (!state->due_times.empty() && state->due_times.top() <= taken_until) state->due_times.pop();
    if (!state->due_times.empty()) {
      auto const until_due = state->due_times.top() - wall::now();
      wait = std::clamp(std::chrono::duration_cast<steady::duration>(until_due), steady::duration::zero(), wait);
    }
    // Made due by this process while the claim above was under way: claim again now.
    if (state->local_due && state->in_flight < opts.max_in_flight) wait = steady::duration::zero();
    timer.expires_after(wait);
    // A full claim means a backlog: claim again as soon as half the deliveries have ended.
    if (full || room == 0) state->waiting_for_room = &timer;
    state->waiting = &timer;
    co_await timer.async_wait(use_tuple);
    state->waiting = nullptr;
    state->waiting_for_room = nullptr;
  }
  ctx.store->set_due_listener({});
  state->waiting = nullptr;
  state->waiting_for_room = nullptr;
}

}  // namespace rebound::delivery
