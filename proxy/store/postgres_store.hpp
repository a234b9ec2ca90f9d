#pragma once
/** The shared store: one PostgreSQL database a fleet of sidecars uses together (libpq).
    Tasks are claimed with `FOR UPDATE SKIP LOCKED` and a lease, so no two instances hold the
    same task, and one that died leaves its tasks to the others once their leases run out.

    `pool` connections, each on a thread of its own, take the queued calls; the calls that
    queued while a transaction was on its way share the next one (one commit for the group).
    When the database is unreachable every call fails at once with a store_error (accepts
    answer 503, never a 202 that is not durable), `unavailable()` says why, and each
    connection reconnects with a growing, jittered wait. A further connection LISTENs for
    the NOTIFY each commit that made tasks due sends, to wake idle schedulers across the
    fleet. The schema is versioned; migrations run under an advisory lock, so a fleet that
    starts at once migrates once.

    Behind a transaction-mode pooler (PgBouncer), which gives each transaction any server
    connection, only what lives inside one transaction holds: statements go unnamed, limits
    are SET LOCAL, the migration lock is the transaction's, and there is no LISTEN (the
    scheduler's poll wakes idle instances). `pooler: auto` finds such a pooler at connect. */
#include "proxy/store/sql_store.hpp"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace rebound::store {

namespace detail {
class pg_connection;
}

class postgres_store final : public sql_store {
 public:
  /// The schema this build writes (its own line of versions: the model is the embedded store's v4).
  static constexpr int schema_version = 1;

  /// What sits between the store and the database (config's store.pooler).
  enum class pooler_mode { detect, none, transaction };

  struct options {
    std::string dsn;       ///< libpq connection string, without the password
    std::string password;  ///< read from store.password_file; empty: none (or libpq's own sources)
    unsigned pool = 4;
    pooler_mode pooler = pooler_mode::detect;
    /// Told once, with the evidence, when a transaction-mode pooler was found; a store thread.
    std::function<void(const std::string& evidence)> on_pooled;
    /// Told how long each commit took and how many calls it carried; runs on a store thread.
    std::function<void(std::chrono::nanoseconds, std::size_t)> on_commit;
    /// Told when the store becomes unusable (with why) or usable again (empty); a store thread.
    std::function<void(const std::string& why)> on_state;
    /// The reconnect waits: from `reconnect_min`, doubling to `reconnect_max`, jittered.
    std::chrono::milliseconds reconnect_min{100};
    std::chrono::milliseconds reconnect_max{5000};
    /// How long a statement's answer may take before its connection is given up (see
    /// pg_connection::answer_within).
    std::chrono::milliseconds answer_within{12000};
    /// store.max_size: past it (pg_database_size, measured every few seconds) new tasks and
    /// keys are refused. 0: no bound.
    std::uint64_t max_size = 0;
  };

  /// Starts the connection threads; they connect (and migrate) in the background, so a
  /// database that is down at start makes the store unavailable, not the process fail.
  explicit postgres_store(options o);
  /// Finishes the queued calls (or fails them when the database is gone), then disconnects.
  ~postgres_store() override;
  postgres_store(const postgres_store&) = delete;
  postgres_store& operator=(const postgres_store&) = delete;

  std::optional<std::string> unavailable() const override;
  std::optional<std::string> full() const override { return guard_.full(); }
  std::optional<std::string> detail() const override;
  std::optional<std::string> identity() const override;
  /// Whether another instance's commit now wakes this one (its LISTEN is up).
  bool listening() const { return listening_.load(); }
  /// Whether a transaction-mode pooler is in between (configured, or found).
  bool pooled() const { return pooled_.load(); }

  /// Transactions committed: fewer than the calls when groups formed.
  std::uint64_t commits() const { return commits_.load(std::memory_order_relaxed); }

 private:
  /// What a call sees of a connection (sql::session): statements, NOTIFY, the size measure.
  class session;

  /// Queues `c` for a store thread; a call no connection could take fails with the reason.
  void enqueue(call c) override;
  /// Calls a lost connection never sent, back to the front of the queue.
  void requeue(std::vector<call>& jobs);
  void serve(unsigned index);
  void listen();
  void run_group(detail::pg_connection& c, std::vector<call>& jobs);
  /// Connects `c` (and, with `migrate`, brings the schema up to date); false with c.error.
  bool connect(detail::pg_connection& c, bool migrate);
  static bool fail_connect(detail::pg_connection& c);
  /// With pooler: auto, whether `c` came through a pooler; false with c.error when the
  /// server could not be asked. Sets c.unnamed to match.
  bool find_pooler(detail::pg_connection& c);
  void note_pooled(const std::string& evidence);
  void connection_lost(const std::string& why);
  void connection_up();
  /// Waits up to `d` unless the store is stopping; false when it is.
  bool pause(std::chrono::milliseconds d);
  /** Measures the database's size on `c` when the last measure is a few seconds old (one
      thread measures; the others go on with the last figure): a fleet shares the database,
      so what the others wrote counts too. */
  void measure(detail::pg_connection& c);
  /// measure(), then the error a new task or key gets when there is no room.
  std::optional<store_error> refuse_new(detail::pg_connection& c);

  options options_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;  ///< connections waiting for calls
  /// Threads waiting out a reconnect pause: a condition of their own, so a call's
  /// notify_one on wake_ always reaches a connection that can take it.
  std::condition_variable stop_;
  std::deque<call> queue_;
  bool stopping_ = false;
  std::atomic<bool> closing_{false};  ///< stopping_, for a wait on the database to read unlocked
  unsigned connected_ = 0;  ///< connections up, under mutex_
  std::string down_reason_ = "connecting to the database";
  std::string identity_;  ///< under mutex_; read from the database at each migrating connect
  /// The listener's LISTEN is up: a NOTIFY from another instance now reaches this one.
  std::atomic<bool> listening_{false};
  std::atomic<bool> pooled_{false};
  std::atomic<std::uint64_t> commits_{0};
  support::size_guard guard_{options_.max_size};
  std::atomic<std::int64_t> measured_at_ms_{-1'000'000};  ///< steady clock, when last measured
  std::vector<std::thread> threads_;  // last: started once everything they use exists
};

}  // namespace rebound::store
