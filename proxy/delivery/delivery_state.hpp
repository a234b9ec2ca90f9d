#pragma once
/** What the scheduler and the deliveries it started share, on the worker's thread that runs
    both: what is in flight, the retries to wake at, the timers to cut short. */
#include "proxy/delivery/scheduler.hpp"
#include "proxy/retry/policy.hpp"
#include "proxy/store/task.hpp"

#include <boost/asio/steady_timer.hpp>

#include <functional>
#include <memory>
#include <queue>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

namespace rebound::delivery {

/// Retry times a scheduler keeps to wake at (a few hundred KiB at most).
inline constexpr std::size_t max_due_times = 16384;

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
  std::priority_queue<store::wall_clock::time_point, std::vector<store::wall_clock::time_point>, std::greater<>>
      due_times;
  /// Registered policies by id, read from the store once: they never change under their id.
  std::unordered_map<std::string, std::shared_ptr<const retry::policy>> policies;
  std::minstd_rand poll_draws;
  /// Another instance's commit made tasks due (its NOTIFY) since the last claim.
  bool notified = false;
  /// A commit of this process made tasks due (an accept, a replay): claimed at once, with no
  /// gap and no poll in between (seed 001: scheduling overhead under 5 ms an attempt).
  bool local_due = false;
  std::chrono::steady_clock::time_point last_claim{};
  /// The gap now: options.notified_gap, doubled (to the poll) while woken claims find nothing.
  std::chrono::steady_clock::duration notified_gap{};
};
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

/** One claimed task's delivery, start to end: where it goes and by which policy, postponed
    (R-7, the concurrency limit) or attempted and judged, and recorded; its lease moved on
    meanwhile. Never throws: a task that cannot be sent is dead-lettered. */
net::awaitable<void> deliver(runtime::session_context ctx, store::retry_task task,
                             std::shared_ptr<delivery_state> state);

}  // namespace rebound::delivery
