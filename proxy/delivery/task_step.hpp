#pragma once
/** Async delivery's decisions (R-3 async, R-7, R-8) as pure functions over values, beside the
    I/O shell that asks them (scheduler.cpp), as the inbound gate's steps sit beside its shell
    (inbound/gate_step.hpp) and retry::decide beside the retry step. A task moves:

        pending --claimed--> in flight --attempt--> succeeded
                               |  |          \----> pending, due after the drawn wait
                               |  |           \---> dead-lettered, raising alert.webhook's
                               |  |                 notice; a notice itself ends exhausted
                               |  \--R-7 or the concurrency limit says not now--> pending,
                               |     postponed: no attempt counted, no dead letter nearer
                               \--it can never be sent (its target, a field)--> dead-lettered

    `judge` is the attempt's arrow, `postponement_for` the postponed one, `end_of` where each
    leaves the task and what follows from it (the alert, the counts). */
#include "config/config.hpp"
#include "proxy/retry/step.hpp"
#include "proxy/store/task.hpp"

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace rebound::delivery {

using wall = store::wall_clock;

/// What becomes of a task after one attempt, as the retry step said it.
struct next_state {
  store::task_status status = store::task_status::pending;
  wall::time_point at{};
  std::string reason;  ///< why it was dead-lettered
};

/** What the retry step (R-1..R-5, the breaker's record, the logs) said of one attempt, as the
    task's next state: the wait it would have waited becomes the time stored for the next
    attempt, from `now`. */
next_state judge(const retry::next_step& next, const retry::attempt_summary& summary, const retry::policy& policy,
                 wall::time_point now);

/// Why an attempt is not made now (R-7 before it, or the dependency's concurrency limit).
enum class held_back { breaker_open, budget_spent, concurrency_limit };

/** How long a task waits when it is held back, in the store: the breaker's own Retry-After, a
    budget's backoff cap, or (at the concurrency limit) the task's own next backoff drawn with
    `u`. None of them is an attempt, so none brings the dead letter nearer. */
std::chrono::milliseconds postponement_for(held_back why, retry::duration breaker_retry_after, unsigned attempts,
                                           const retry::policy& policy, double u);
/// The `task_postponed` line's reason.
std::string_view to_string(held_back why);

/// Where an attempt leaves a task, and what follows from it.
struct task_end {
  /// As stored. An alert notice that ran out is exhausted, never dead-lettered: a failing
  /// alert must not raise another.
  store::task_status status = store::task_status::pending;
  bool ended = false;        ///< no further attempt: counted in retry_task_age_seconds
  bool raise_alert = false;  ///< R-8: a dead letter raises alert.webhook's notice
};
task_end end_of(store::task_status judged, bool is_alert);

}  // namespace rebound::delivery
