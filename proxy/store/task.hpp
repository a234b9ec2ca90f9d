#pragma once
/** Seed 001's data model for async delivery: a RetryTask (a call handed over, stored until it
    is delivered or dead-lettered) and the AttemptLog of each try. Plain values: the store
    keeps them, the scheduler decides what happens to them. */
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rebound::store {

using wall_clock = std::chrono::system_clock;

enum class task_status { pending, in_flight, succeeded, exhausted, cancelled, dead_lettered };

std::string_view to_string(task_status s);
std::optional<task_status> parse_task_status(std::string_view s);

struct retry_task {
  std::string id;               ///< UUIDv4, made at accept
  std::string idempotency_key;  ///< the app's, else one made at accept: the same on every attempt (R-6)
  std::string dependency;
  std::string method;
  std::string target;  ///< absolute URL
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  std::string policy_id;  ///< empty: the route's policy
  unsigned attempts = 0;  ///< made so far; kept when a lease expires mid-attempt
  wall_clock::time_point next_attempt_at{};
  wall_clock::time_point created_at{};
  task_status status = task_status::pending;
  /// Where R-3's total time and R-2's count start: the accept, or the last replay of a dead
  /// letter (which gets a fresh window; its earlier attempts stay in the log).
  wall_clock::time_point window_start{};
  unsigned attempts_before = 0;  ///< attempts made before that replay
  /// Not stored: taken even past store.max_size. Only R-8's alert notice is: it is small, there
  /// is at most one per dead letter, and refusing it would hide the dead letter from everyone.
  bool beyond_max_size = false;
};

struct attempt_log {
  std::string task_id;
  unsigned number = 0;  ///< 1 for the first attempt
  wall_clock::time_point at{};
  unsigned status = 0;     ///< the upstream's status, or 0
  std::string error_type;  ///< SPEC 6's type when there was no response, else empty
  std::chrono::microseconds duration{0};
};

/// What a new task is made of, by either way in: a handed-over call (http/hand_over.cpp) or
/// POST /retry-tasks (admin/task_api.cpp).
struct task_parts {
  std::string dependency;
  std::string method;
  std::string target;  ///< absolute URL
  /// The head as delivery will send it, without framing (delivery sets it for the body).
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  std::string policy_id;        ///< empty: the route's policy
  std::string key_header;       ///< the route's idempotency header
  std::string idempotency_key;  ///< R-6's (idempotency::plan_key with key_need::always)
};

/** The one way a task is made: PENDING, due now, its window starting now, with an id of its
    own and its key on its head (added unless the head already carries that field, as a
    handed-over request with the app's own key does). Nullopt when no id could be made. */
std::optional<retry_task> new_task(task_parts parts);

}  // namespace rebound::store
