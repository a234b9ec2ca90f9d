#pragma once
/** Async delivery (R-3 async, R-8): claims due tasks from the store with a lease and delivers
    each through the same exchange (upstream::run_attempt) and the same decision
    (retry::decide) as a request a client waits for. What decide says about an attempt is
    written back: delivered, due again after the drawn wait, or dead-lettered with every
    attempt kept. Pending tasks live in the store, not in memory. */
#include "proxy/net.hpp"
#include "proxy/runtime/session_context.hpp"

#include <chrono>
#include <string>

namespace rebound::observe {
class metrics;
}

namespace rebound::delivery {

struct scheduler_options {
  std::string owner;  ///< this process in the leases it takes
  /// How often the store is asked for due tasks: each wait drawn from [3/4, 5/4] of it, so
  /// the instances of a fleet that came up together do not ask the database in step.
  std::chrono::milliseconds poll{100};
  std::uint64_t seed = 0;  ///< the poll's random source
  /// A claim woken by another instance's commit (a shared store's NOTIFY) comes at least this
  /// long after the last claim, so the fleet's commits do not each bring every instance; the
  /// gap doubles, up to `poll`, while such claims find nothing (the others were quicker).
  std::chrono::milliseconds notified_gap{200};
  /// A task not finished by then is taken again. Long: it only guards against a delivery
  /// that hangs past every timeout, since a restart frees the leases of the process that died.
  std::chrono::seconds lease{3600};
  std::size_t max_in_flight = 64;  ///< deliveries under way at once
  /// retry_task_age_seconds and retry_tasks{status}; null: not kept.
  observe::metrics* metrics = nullptr;
  std::chrono::seconds count_every{10};  ///< how often retry_tasks{status} is read and ended tasks purged
  std::size_t purge_batch = 5000;        ///< ended tasks deleted per commit (store.retention)
};

/** The policy id of an alert notice (alert.webhook): R-3's webhook table, and at its end the
    notice is EXHAUSTED, never dead-lettered, so a failing alert cannot raise another. Not a
    valid id for a registered policy, which takes letters, digits, `.`, `_` and `-`. */
inline constexpr std::string_view alert_policy_id = "rebound:alert";

/// Runs on one worker's io_context until a drain begins; `ctx.store` is set.
net::awaitable<void> run_scheduler(runtime::session_context ctx, scheduler_options options);

}  // namespace rebound::delivery
