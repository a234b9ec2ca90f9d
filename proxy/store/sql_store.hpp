#pragma once
/** The store contract written once for SQL (issue 49): `sql_store` makes the 19 calls of
    task_store out of the statements of statements.cpp, on whatever database a backend gives
    it through `sql::session`. A backend (sqlite_store, postgres_store) keeps what is its
    own: the schema and migrations, its threads, how a group of calls shares a transaction
    and what happens when one of them fails, NOTIFY, and how it measures its size. */
#include "proxy/store/statements.hpp"
#include "proxy/store/store_support.hpp"

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace rebound::store {

namespace sql {

/// A parameter of a statement, alive for the run it is passed to.
struct value {
  enum class kind { text, bytes, number } type;
  std::string_view chars;
  std::int64_t number = 0;
};
inline value text(std::string_view v) { return {value::kind::text, v, 0}; }
inline value bytes(std::string_view v) { return {value::kind::bytes, v, 0}; }
inline value number(std::int64_t v) { return {value::kind::number, {}, v}; }

/// What a statement gave: its rows (an integer column read as one, the rest as bytes) and the
/// rows it changed.
class rows {
 public:
  using cell = std::variant<std::monostate, std::int64_t, std::string>;

  std::size_t size() const { return cells_.size(); }
  bool empty() const { return cells_.empty(); }
  std::string text(std::size_t row, std::size_t col) const {
    auto const& c = cells_[row][col];
    if (auto const* s = std::get_if<std::string>(&c)) return *s;
    if (auto const* n = std::get_if<std::int64_t>(&c)) return std::to_string(*n);
    return {};
  }
  /// 0 for NULL.
  std::int64_t integer(std::size_t row, std::size_t col) const {
    auto const* n = std::get_if<std::int64_t>(&cells_[row][col]);
    return n ? *n : 0;
  }
  std::uint64_t changes() const { return changes_; }

  void add_row(std::vector<cell> r) { cells_.push_back(std::move(r)); }
  void set_changes(std::uint64_t n) { changes_ = n; }

 private:
  std::vector<std::vector<cell>> cells_;
  std::uint64_t changes_ = 0;
};

/** A call's view of its database, inside the transaction its group shares. What differs
    between the backends is here, by name; everything else the calls do is the same. */
class session {
 public:
  /// Runs one statement of the backend's dialect; nothing when it failed (then error()).
  std::optional<rows> run(const std::string& sql, std::initializer_list<value> params) {
    return run_values(sql, std::span<const value>(params.begin(), params.size()));
  }
  std::optional<rows> run(const std::string& sql, const std::vector<value>& params) { return run_values(sql, params); }
  virtual std::string error() const = 0;

  /// This call made tasks due now (an accept, a replay): once committed, schedulers are woken.
  virtual void made_due() = 0;
  /// The call moved `n` tasks between statuses (none: created or deleted); a backend that
  /// keeps the counts itself (SQLite) counts them once the transaction commits.
  virtual void moved(std::optional<task_status> /*from*/, std::optional<task_status> /*to*/, std::int64_t /*n*/ = 1) {}
  /// The counts by status when the backend keeps them (reading them then costs nothing);
  /// nothing: they are counted by the database.
  virtual std::optional<status_counts> kept_counts() const { return std::nullopt; }

  /** Marks where a call's statements begin; `undo_call` then undoes them while the calls
      grouped with it go on. SQLite: a savepoint (a failed statement aborts itself alone).
      PostgreSQL: nothing (a failed statement aborts the whole transaction, and the backend runs
      each call of the group again in a transaction of its own). False when it could not. */
  virtual bool begin_call() { return true; }
  virtual void end_call(bool keep) { (void)keep; }

  /// Whether the store was full at its last measure (SQLite measures now: it is cheap).
  virtual bool full() = 0;
  /// The error a new task or key gets when there is no room (measured as full() does, or
  /// the measure's own failure); nothing: there is room.
  virtual std::optional<store_error> refuse_new() = 0;
  /// The error of a write that failed with `message`; a backend that can tell a full disk
  /// (SQLite) notes it and answers 507's refusal.
  virtual std::optional<store_error> write_failed(std::string message) { return store_error{std::move(message)}; }
  /// Claims come every poll: a backend whose size is not measured at each commit measures it
  /// here, so /readyz stays current while nothing new arrives. False when that failed.
  virtual bool keep_size_current() { return true; }

 protected:
  ~session() = default;
  virtual std::optional<rows> run_values(const std::string& sql, std::span<const value> params) = 0;
};

}  // namespace sql

/** task_store's calls over a sql::session. A backend derives from it, queues each call for
    its threads (`enqueue`) and runs it with a session over its connection. */
class sql_store : public task_store {
 public:
  void submit_accept(retry_task task, callback<bool> done) final;
  void submit_claim(std::string owner, wall_clock::time_point now, wall_clock::time_point lease_until,
                    std::size_t limit, callback<std::vector<retry_task>> done) final;
  void submit_finish_attempt(std::string owner, attempt_log attempt, task_status next,
                             wall_clock::time_point next_attempt_at, callback<bool> done) final;
  void submit_postpone(std::string owner, std::string id, wall_clock::time_point until, callback<bool> done) final;
  void submit_renew_lease(std::string owner, std::string id, wall_clock::time_point lease_until,
                          callback<bool> done) final;
  void submit_get(std::string id, callback<std::optional<retry_task>> done) final;
  void submit_attempts(std::string id, unsigned after, std::size_t limit,
                       callback<std::vector<attempt_log>> done) final;
  void submit_list(task_filter filter, callback<std::vector<retry_task>> done) final;
  void submit_replay(std::string id, wall_clock::time_point now, callback<bool> done) final;
  void submit_replay_matching(task_filter filter, wall_clock::time_point now,
                              callback<std::vector<std::string>> done) final;
  void submit_cancel(std::string id, wall_clock::time_point now, callback<bool> done) final;
  void submit_delete_dead_letter(std::string id, callback<bool> done) final;
  void submit_counts(callback<status_counts> done) final;
  void submit_backlog(wall_clock::time_point before, callback<backlog> done) final;
  void submit_purge(wall_clock::time_point ended_before, std::size_t limit, callback<std::uint64_t> done) final;
  void submit_put_policy(stored_policy p, callback<policy_put> done) final;
  void submit_get_policy(std::string id, callback<std::optional<stored_policy>> done) final;
  void submit_claim_key(std::string scope_key, std::string fingerprint, wall_clock::time_point now,
                        wall_clock::time_point lease_until, callback<key_claim> done) final;
  void submit_complete_key(std::string scope_key, pinned_response r, wall_clock::time_point expires_at,
                           callback<bool> done) final;
  void submit_release_key(std::string scope_key, callback<bool> done) final;
  void submit_purge_keys(wall_clock::time_point now, std::size_t limit, callback<std::uint64_t> done) final;

 protected:
  /// A queued call: its work inside a transaction, and how it is failed without running.
  struct call {
    std::function<support::reply(sql::session&)> run;
    std::function<void(const store_error&)> fail;
  };

  explicit sql_store(sql::dialect d) : dialect_(d) {}
  ~sql_store() override = default;

  /// Queues `c` for the backend's threads.
  virtual void enqueue(call c) = 0;
  /// The store contract's statements, in the backend's dialect (statements.cpp).
  const sql::statements& q() const;

 private:
  template <class T, class Work>
  void queue(callback<T> done, Work work);

  sql::dialect dialect_;
};

}  // namespace rebound::store
