#include "proxy/delivery/scheduler.hpp"

#include "config/config.hpp"
#include "proxy/delivery/delivery_state.hpp"
#include "proxy/runtime/session_registry.hpp"
#include "proxy/observe/log.hpp"
#include "proxy/observe/metrics.hpp"
#include "proxy/store/task_store.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>

#include <random>

namespace rebound::delivery {
namespace {

using wall = store::wall_clock;

using steady = std::chrono::steady_clock;

/// The next poll's wait: uniform in [3/4, 5/4] of `poll`, as the options say.
steady::duration next_poll(std::chrono::milliseconds poll, std::minstd_rand& draws) {
  std::uniform_int_distribution<std::int64_t> pick(poll.count() * 3 / 4, poll.count() * 5 / 4);
  return std::chrono::milliseconds(pick(draws));
}
/** store.retention: ended tasks go in batches, each its own commit, so deliveries and accepts
    go on between them; and the inbound side's idempotency keys and event ids whose TTL ran
    out (R-6's windows). */
net::awaitable<void> purge_ended(const runtime::session_context& ctx, const scheduler_options& opts) {
  auto const before = wall::now() - ctx.cfg().store.retention;
  for (;;) {
    auto [pe, purged] = co_await store::async_purge(*ctx.store, before, opts.purge_batch, use_tuple);
    if (pe || purged < opts.purge_batch || ctx.sessions->draining()) break;
  }
  for (;;) {
    auto [ke, purged] = co_await store::async_purge_keys(*ctx.store, wall::now(), opts.purge_batch, use_tuple);
    if (ke || purged < opts.purge_batch || ctx.sessions->draining()) break;
  }
}

/// retry_tasks{status}, the backlog gauges and retry_store_up, read from the store.
net::awaitable<void> count_tasks(const runtime::session_context& ctx, observe::metrics& metrics) {
  auto [ce, counts] = co_await store::async_counts(*ctx.store, use_tuple);
  // A count answered means the database was reached, so its id is known.
  auto const store_id = ctx.store->identity().value_or("");
  if (!ce && !store_id.empty())
    for (std::size_t i = 0; i < counts.size(); ++i)
      metrics.set_tasks(store_id, store::to_string(static_cast<store::task_status>(i)), counts[i]);
  auto const now = wall::now();
  auto const day_ago = now - std::chrono::hours(24);
  auto [be, backlog] = co_await store::async_backlog(*ctx.store, day_ago, use_tuple);
  if (!be && !store_id.empty())
    metrics.set_backlog(
        store_id, backlog.started_before,
        backlog.oldest ? std::max(now - *backlog.oldest, wall::duration::zero()) : wall::duration::zero());
  metrics.set_store_up(!ce && !be && !ctx.store->unavailable());
}
/// What one claim took: whether it filled the room (more may be due), and the time it
/// claimed up to.
struct claimed {
  bool full = false;
  wall::time_point until;
};

/** Claims up to `room` due tasks and starts a delivery of each. Tasks made due by this process
    are claimed at once; a wake that is only another instance's NOTIFY waits out the gap. */
net::awaitable<claimed> claim_due(const runtime::session_context& ctx, const std::shared_ptr<delivery_state>& state,
                                  net::steady_timer& timer, std::size_t room, bool& store_down) {
  auto const& opts = state->options;
  bool const notified = state->notified;
  // Made due here (an accept, or a retry this process scheduled): claimed now.
  bool const own =
      std::exchange(state->local_due, false) || (!state->due_times.empty() && state->due_times.top() <= wall::now());
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
  auto const now = wall::now();
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
  for (auto& t : tasks)
    net::co_spawn(timer.get_executor(), deliver(ctx, std::move(t), state), [log = ctx.log](std::exception_ptr x) {
      if (!x) return;
      try {
        std::rethrow_exception(x);
      } catch (const std::exception& ex) {
        log->error("internal_error", {{"where", "delivery"}, {"message", ex.what()}});
      }
    });
  co_return claimed{!e && tasks.size() == room, now};
}

}  // namespace

net::awaitable<void> run_scheduler(runtime::session_context ctx, scheduler_options options) {
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
      co_await purge_ended(ctx, opts);
    }
    if (opts.metrics && steady::now() >= next_count) {
      next_count = steady::now() + opts.count_every;
      co_await count_tasks(ctx, *opts.metrics);
    }
    std::size_t const room = opts.max_in_flight - std::min(opts.max_in_flight, state->in_flight);
    // Retries due by the claim's time are claimed by it (or wait for room). Not inside ?: (GCC 12).
    claimed claim{false, wall::now()};
    if (room > 0) claim = co_await claim_due(ctx, state, timer, room, store_down);
    bool const full = claim.full;
    auto const taken_until = claim.until;
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