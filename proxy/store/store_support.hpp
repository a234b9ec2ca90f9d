#pragma once
/** What both stores share: how times, headers and replies are kept, so a task written by
    one reads the same from the other. */
#include "proxy/store/task_store.hpp"

#include <atomic>
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

/** The bound on what a store holds (store.max_size). New tasks and new inbound keys are
    refused once the database uses that much, or once a write failed for want of disk; calls
    that move, end or purge what is there go on, so deliveries and retention drain it and it
    takes new work again by itself. Both stores share it; each measures its own way (SQLite:
    the pages in use, PostgreSQL: pg_database_size). Thread-safe: /readyz reads it. */
class size_guard {
 public:
  explicit size_guard(std::uint64_t max_bytes) : max_(max_bytes) {}

  /** The database now uses `bytes`. Full from max_size on, and room again only below seven
      eighths of it: what a store uses moves a little with every commit (pages freed and
      taken, a checkpoint of SQLite's log), and a store at its limit must not take and refuse
      new work by turns. */
  void measured(std::uint64_t bytes) {
    used_.store(bytes, std::memory_order_relaxed);
    if (max_ > 0 && bytes >= max_)
      over_.store(true, std::memory_order_relaxed);
    else if (bytes < max_ - max_ / 8)
      over_.store(false, std::memory_order_relaxed);
    if (!full()) announced_.store(false, std::memory_order_relaxed);
  }
  /// A write failed because the disk is full (true), or a write went through (false).
  void disk_full(bool full) {
    disk_full_.store(full, std::memory_order_relaxed);
    if (!this->full()) announced_.store(false, std::memory_order_relaxed);
  }

  /// Why a new task or key cannot be taken now; nothing: it can.
  std::optional<std::string> full() const {
    if (disk_full_.load(std::memory_order_relaxed)) return std::string("the disk under the store is full");
    auto const used = used_.load(std::memory_order_relaxed);
    if (max_ > 0 && over_.load(std::memory_order_relaxed))
      return "the store holds " + std::to_string(used) + " bytes, store.max_size is " + std::to_string(max_) +
             (used < max_ ? " (it takes new work again below 7/8 of it)" : "");
    return std::nullopt;
  }
  /// full() as the error a refused call answers with.
  std::optional<store_error> refuse_new() {
    if (auto why = full()) return refusal("store full: " + *why);
    return std::nullopt;
  }
  /// A refusal for want of room, `first` set on the first since the store last had room.
  store_error refusal(std::string message) {
    return store_error{std::move(message), true, !announced_.exchange(true, std::memory_order_relaxed)};
  }

 private:
  std::uint64_t max_;  ///< 0: no bound
  std::atomic<std::uint64_t> used_{0};
  std::atomic<bool> disk_full_{false};
  std::atomic<bool> over_{false};  ///< reached max_size and not yet back below 7/8 of it
  std::atomic<bool> announced_{false};  ///< a refusal since the store last had room
};

}  // namespace rebound::store::support
