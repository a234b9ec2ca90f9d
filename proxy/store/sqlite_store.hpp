#pragma once
/** The embedded store (the default): one SQLite file in WAL mode, written by one thread of
    its own. Calls that arrive while a commit is on its way (accepts, claims, attempt
    records) are carried by the next transaction together, one fsync for the group, so
    durability caps neither the accept nor the delivery rate. The schema is versioned (`PRAGMA
    user_version`); migrations run at open. */
#include "proxy/store/store_support.hpp"

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

class sqlite_store final : public task_store {
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

  void submit_accept(retry_task task, callback<bool> done) override;
  void submit_claim(std::string owner, wall_clock::time_point now, wall_clock::time_point lease_until,
                    std::size_t limit, callback<std::vector<retry_task>> done) override;
  void submit_finish_attempt(std::string owner, attempt_log attempt, task_status next,
                             wall_clock::time_point next_attempt_at, callback<bool> done) override;
  void submit_postpone(std::string owner, std::string id, wall_clock::time_point until, callback<bool> done) override;
  void submit_renew_lease(std::string owner, std::string id, wall_clock::time_point lease_until,
                          callback<bool> done) override;
  void submit_get(std::string id, callback<std::optional<retry_task>> done) override;
  void submit_attempts(std::string id, unsigned after, std::size_t limit,
                       callback<std::vector<attempt_log>> done) override;
  void submit_list(task_filter filter, callback<std::vector<retry_task>> done) override;
  void submit_replay(std::string id, wall_clock::time_point now, callback<bool> done) override;
  void submit_replay_matching(task_filter filter, wall_clock::time_point now,
                              callback<std::vector<std::string>> done) override;
  void submit_cancel(std::string id, wall_clock::time_point now, callback<bool> done) override;
  void submit_delete_dead_letter(std::string id, callback<bool> done) override;
  void submit_counts(callback<status_counts> done) override;
  void submit_backlog(wall_clock::time_point before, callback<backlog> done) override;
  void submit_purge(wall_clock::time_point ended_before, std::size_t limit, callback<std::uint64_t> done) override;
  void submit_put_policy(stored_policy p, callback<policy_put> done) override;
  void submit_get_policy(std::string id, callback<std::optional<stored_policy>> done) override;
  void submit_claim_key(std::string scope_key, std::string fingerprint, wall_clock::time_point now,
                        wall_clock::time_point lease_until, callback<key_claim> done) override;
  void submit_complete_key(std::string scope_key, pinned_response r, wall_clock::time_point expires_at,
                           callback<bool> done) override;
  void submit_release_key(std::string scope_key, callback<bool> done) override;
  void submit_purge_keys(wall_clock::time_point now, std::size_t limit, callback<std::uint64_t> done) override;

  std::optional<std::string> full() const override { return guard_.full(); }
  std::optional<std::string> identity() const override { return identity_; }

  /// Transactions committed: fewer than the calls when groups formed.
  std::uint64_t commits() const { return commits_.load(std::memory_order_relaxed); }

 private:
  /** A call's reply, run once the transaction that carried it ended: with the commit's
      error if the commit failed (then nothing the call wrote is on disk), else with what
      the call found. */
  using reply = std::function<void(const std::optional<store_error>& commit_failed)>;
  /// A call's work inside the group's transaction.
  using work = std::function<reply(detail::database&)>;

  void run();
  void enqueue(work w);
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
  std::vector<work> work_;
  bool stopping_ = false;
  std::atomic<std::uint64_t> commits_{0};
  std::thread thread_;  // last: started once everything it uses exists
};

}  // namespace rebound::store
