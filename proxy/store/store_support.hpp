#pragma once
/** What both stores share: how times, headers and replies are kept, so a task written by
    one reads the same from the other. */
#include "proxy/store/task_store.hpp"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rebound::store::support {

/// Times are kept as milliseconds since the Unix epoch.
inline std::int64_t to_ms(wall_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}
inline wall_clock::time_point from_ms(std::int64_t ms) {
  return wall_clock::time_point(std::chrono::duration_cast<wall_clock::duration>(std::chrono::milliseconds(ms)));
}

/// Headers as name NUL value NUL ...: HTTP field values hold no NUL.
std::string encode_headers(const std::vector<std::pair<std::string, std::string>>& headers);
std::vector<std::pair<std::string, std::string>> decode_headers(std::string_view in);

/// The columns of retry_tasks a task is read from, in the order read_task expects them.
inline constexpr const char* task_columns =
    "id, idempotency_key, dependency, method, target, headers, body, policy_id, attempts, next_attempt_at, "
    "created_at, status, window_start, attempts_before";

/** A call's reply, run once the transaction that carried it ended: with the commit's error if
    the commit failed (then nothing the call wrote is kept), else with what the call found. */
using reply = std::function<void(const std::optional<store_error>& commit_failed)>;

/// The reply of a call that found `value` (or failed with `e`), unless its commit fails.
template <class T>
reply answer(task_store::callback<T> done, std::optional<store_error> e, T value) {
  return [done = std::move(done), e = std::move(e),
          value = std::move(value)](const std::optional<store_error>& commit_failed) mutable {
    if (commit_failed) return done(commit_failed, T{});
    done(std::move(e), std::move(value));
  };
}
template <class T>
reply failure(task_store::callback<T> done, std::string message) {
  return answer<T>(std::move(done), store_error{std::move(message)}, T{});
}

}  // namespace rebound::store::support
