#pragma once
/** The embedded store (the default): one SQLite file in WAL mode, written by one thread of
    its own. Accepts that arrive together are committed together, one fsync for the group,
    so durability does not cap the accept rate. The schema is versioned (`PRAGMA
    user_version`); migrations run at open. */
#include "proxy/store/task_store.hpp"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

struct sqlite3;

namespace rebound::store {

class sqlite_store final : public task_store {
 public:
  /// The schema this build writes; an older file is migrated at open, a newer one refused.
  static constexpr int schema_version = 2;

  /** Opens `path` (created 0600 when new), sets WAL and full synchronous commits, and
      migrates it. Throws std::runtime_error when it cannot: a start-up error. */
  explicit sqlite_store(const std::string& path);
  /// Finishes the queued work, then closes the file.
  ~sqlite_store() override;
  sqlite_store(const sqlite_store&) = delete;
  sqlite_store& operator=(const sqlite_store&) = delete;

  void submit_accept(retry_task task, callback<bool> done) override;
  void submit_claim(std::string owner, wall_clock::time_point now, wall_clock::time_point lease_until,
                    std::size_t limit, callback<std::vector<retry_task>> done) override;
  void submit_finish_attempt(std::string owner, attempt_log attempt, task_status next,
                             wall_clock::time_point next_attempt_at, callback<bool> done) override;
  void submit_postpone(std::string owner, std::string id, wall_clock::time_point until, callback<bool> done) override;
  void submit_get(std::string id, callback<std::optional<retry_task>> done) override;
  void submit_attempts(std::string id, callback<std::vector<attempt_log>> done) override;
  void submit_count(task_status s, callback<std::uint64_t> done) override;
  void submit_list(task_status status, std::string dependency, std::string after, std::size_t limit,
                   callback<std::vector<retry_task>> done) override;
  void submit_replay(std::string id, wall_clock::time_point now, callback<bool> done) override;
  void submit_cancel(std::string id, callback<bool> done) override;

  /// Transactions that committed accepted tasks: fewer than the tasks when groups formed.
  std::uint64_t accept_commits() const { return accept_commits_.load(std::memory_order_relaxed); }

 private:
  struct pending_accept {
    retry_task task;
    callback<bool> done;
  };
  using work = std::function<void(sqlite3*)>;

  void run();
  void commit_accepts(std::vector<pending_accept>& group);
  void enqueue(work w);

  sqlite3* db_ = nullptr;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<pending_accept> accepts_;
  std::deque<work> work_;
  bool stopping_ = false;
  std::atomic<std::uint64_t> accept_commits_{0};
  std::thread thread_;  // last: started once everything it uses exists
};

}  // namespace rebound::store
