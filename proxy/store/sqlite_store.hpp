#pragma once
/** The embedded store (the default): one SQLite file in WAL mode, written by one thread of
    its own. Calls that arrive while a commit is on its way (accepts, claims, attempt
    records) are carried by the next transaction together, one fsync for the group, so
    durability caps neither the accept nor the delivery rate. The schema is versioned (`PRAGMA
    user_version`); migrations run at open. */
#include "proxy/store/sql_store.hpp"

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace rebound::store {

namespace detail {
class database;
}

class sqlite_store final : public sql_store {
 public:
  /// The schema this build writes; an older file is migrated at open, a newer one refused.
  static constexpr int schema_version = 4;

  /** Opens `path` (created 0600 when new), sets WAL and full synchronous commits, and
      migrates it. Throws std::runtime_error when it cannot: a start-up error.
      `on_commit`, when set, is told how long each commit (its fsync) took and how many
      calls it carried; it runs on the store's thread. */
  explicit sqlite_store(const std::string& path,
                        std::function<void(std::chrono::nanoseconds, std::size_t)> on_commit = {},
                        std::uint64_t max_size = 0);
  /// Finishes the queued work, then closes the file.
  ~sqlite_store() override;
  sqlite_store(const sqlite_store&) = delete;
  sqlite_store& operator=(const sqlite_store&) = delete;

  std::optional<std::string> full() const override { return guard_.full(); }
  std::optional<std::string> identity() const override { return identity_; }

  /// Transactions committed: fewer than the calls when groups formed.
  std::uint64_t commits() const { return commits_.load(std::memory_order_relaxed); }

 private:
  /// What a call sees of the file (sql::session): statements, savepoints, kept counts.
  class session;

  void enqueue(call c) override;
  void run();
  /// store.max_size or a full disk, measured now: the error a new task or key gets.
  std::optional<store_error> refuse_new(detail::database& db);
  /// The error of a write that failed; a full disk is noted (and said) as such.
  std::optional<store_error> write_failed(detail::database& db, std::string message);

  std::unique_ptr<detail::database> db_;
  std::string identity_;  ///< set before the thread starts, then only read
  std::function<void(std::chrono::nanoseconds, std::size_t)> on_commit_;
  support::size_guard guard_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<call> work_;
  bool stopping_ = false;
  std::atomic<std::uint64_t> commits_{0};
  std::thread thread_;  // last: started once everything it uses exists
};

}  // namespace rebound::store
