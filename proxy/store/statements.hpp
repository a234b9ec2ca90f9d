#pragma once
/** Every statement of the store contract (task_store.hpp), written once for both stores and
    rendered for each one's SQL dialect at first use. What differs between the two is named in
    statements.cpp where it is made: placeholders, casts, row locks, and the cascade SQLite's
    schema lacks. Each store keeps what is its own: the schema and migrations, how it runs a
    transaction, and how it measures and counts. */
#include <string>

namespace rebound::store::sql {

enum class dialect { sqlite, postgres };

/// Parameters are numbered as written in statements.cpp ($1, $2, ... in order of the C++ call).
struct statements {
  std::string accept;              ///< the 12 columns of a new task
  std::string claim_expired;       ///< $1 owner, $2 lease until, $3 now, $4 limit; RETURNING the task columns
  std::string claim_due;           ///< the same, for due PENDING tasks
  std::string finish_attempt;      ///< $1 status, $2 attempts, $3 next attempt, $4 id, $5 owner
  std::string log_attempt;         ///< $1 task, $2 number, $3 at, $4 status, $5 error type, $6 duration
  std::string postpone;            ///< $1 until, $2 id, $3 owner
  std::string renew_lease;         ///< $1 lease until, $2 id, $3 owner
  std::string get_task;            ///< $1 id
  std::string attempts;            ///< $1 task, $2 after, $3 limit
  std::string list;                ///< the filter: $1 status .. $6 limit (bind_filter order)
  std::string replay;              ///< $1 id, $2 now
  std::string replay_matching;     ///< the filter, $7 now; RETURNING id
  std::string cancel;              ///< $1 id, $2 now
  std::string delete_dead_letter;  ///< $1 id
  std::string delete_attempts_of;  ///< $1 task (SQLite: no cascade)
  std::string count_by_status;
  std::string backlog;
  std::string purge_tasks;     ///< $1 status, $2 ended before, $3 limit
  std::string purge_attempts;  ///< the same rows' attempts, first (SQLite: no cascade)
  std::string put_policy;      ///< $1 id, $2 spec, $3 created at
  std::string policy_spec;     ///< $1 id
  std::string get_policy;      ///< $1 id
  std::string key_known;       ///< $1 scope key
  std::string find_key;        ///< $1 scope key; the row locked where rows lock
  std::string insert_key;      ///< $1 scope key, $2 fingerprint, $3 lease until; nothing when the key exists
  std::string reclaim_key;     ///< the same, taking over a key that expired or whose holder died
  std::string complete_key;    ///< $1 scope key, $2 expires at, $3 status, $4 headers, $5 body
  std::string release_key;     ///< $1 scope key
  std::string purge_keys;      ///< $1 now, $2 limit
  /// PostgreSQL's attempt_logs go with their task (ON DELETE CASCADE); SQLite's schema has no
  /// cascade (a table cannot change its foreign key in place), so its attempts are deleted
  /// first (delete_attempts_of, purge_attempts).
  bool attempts_cascade = false;
};

/// The statements rendered for `d`, made once.
const statements& statements_for(dialect d);

}  // namespace rebound::store::sql
