#include "proxy/store/statements.hpp"

#include "proxy/store/store_support.hpp"

#include <regex>

namespace rebound::store::sql {
namespace {

/** Renders a statement written in PostgreSQL's form for `d`. The differences, by name:
    - placeholders: `$n` in PostgreSQL, `?n` in SQLite (same numbers; SQLite would number a
      `$n` by first appearance instead);
    - casts: PostgreSQL cannot infer the type of a parameter compared with a literal
      (`$2::text = ''`), SQLite has no `::`;
    - `{skip_locked}`: in PostgreSQL a fleet's instances share the tables, and a claim or
      purge passes over rows another instance is taking (FOR UPDATE SKIP LOCKED) instead of
      queueing behind it; SQLite has one writer, the process that holds the file;
    - `{for_update}`: the same for a read that decides a write (the inbound key claim). */
std::string render(std::string sql, dialect d) {
  auto token = [&sql](const std::string& name, const std::string& value) {
    for (auto at = sql.find(name); at != std::string::npos; at = sql.find(name, at + value.size()))
      sql.replace(at, name.size(), value);
  };
  if (d == dialect::postgres) {
    token("{skip_locked}", " FOR UPDATE SKIP LOCKED");
    token("{for_update}", " FOR UPDATE");
    return sql;
  }
  token("{skip_locked}", "");
  token("{for_update}", "");
  sql = std::regex_replace(sql, std::regex(R"(::(text|bigint))"), "");
  return std::regex_replace(sql, std::regex(R"(\$([0-9]+))"), "?$1");
}

/// A replayed dead letter: due at once, with a fresh R-2/R-3 window, its history kept.
std::string replay_set(const char* now) {
  return std::string("UPDATE retry_tasks SET status = 'PENDING', next_attempt_at = ") + now +
         ", window_start = " + now + ", attempts_before = attempts ";
}

/// The WHERE of a task_filter over retry_tasks, parameters $1 to $6.
constexpr const char* filter_where =
    "WHERE status = $1::text AND ($2::text = '' OR dependency = $2::text) AND ($3::bigint < 0 OR next_attempt_at "
    ">= $3::bigint) AND ($4::bigint < 0 OR next_attempt_at < $4::bigint) AND id > $5::text ORDER BY id "
    "LIMIT $6::bigint";

/// A finished task's next_attempt_at is when it ended (cancel, finish_attempt).
constexpr const char* ended_rows =
    "(SELECT id FROM retry_tasks WHERE status = $1 AND next_attempt_at < $2 ORDER BY next_attempt_at LIMIT $3"
    "{skip_locked})";

/// The task queue's statements: accept, claim, finish, postpone, renew, read (R-8).
void task_queue_statements(statements& s, const std::string& columns) {
  std::string const select_task = "SELECT " + columns + " FROM retry_tasks ";
  s.accept =
      "INSERT INTO retry_tasks (id, idempotency_key, dependency, method, target, headers, body, policy_id, "
      "attempts, next_attempt_at, created_at, status) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)";
  // The leases that ran out first (their holder died mid-attempt; the attempt count is
  // kept), then the due tasks: two statements, each walking its own index in order (one OR'd
  // query would sort every due task to find the first few).
  s.claim_expired =
      "UPDATE retry_tasks SET lease_owner = $1, lease_expires = $2 WHERE id IN (SELECT id FROM retry_tasks "
      "WHERE status = 'IN_FLIGHT' AND lease_expires <= $3 ORDER BY lease_expires LIMIT $4{skip_locked}) RETURNING " +
      columns;
  s.claim_due =
      "UPDATE retry_tasks SET status = 'IN_FLIGHT', lease_owner = $1, lease_expires = $2 WHERE id IN "
      "(SELECT id FROM retry_tasks WHERE status = 'PENDING' AND next_attempt_at <= $3 "
      "ORDER BY next_attempt_at LIMIT $4{skip_locked}) RETURNING " +
      columns;
  // Only the lease's holder ends an attempt: one whose lease ran out lost the task to another.
  s.finish_attempt =
      "UPDATE retry_tasks SET status = $1, attempts = $2, next_attempt_at = $3, lease_owner = NULL, "
      "lease_expires = NULL WHERE id = $4 AND status = 'IN_FLIGHT' AND lease_owner = $5";
  s.log_attempt =
      "INSERT INTO attempt_logs (task_id, number, at, status, error_type, duration_us) VALUES ($1, $2, $3, $4, $5, "
      "$6) ON CONFLICT (task_id, number) DO UPDATE SET at = excluded.at, status = excluded.status, "
      "error_type = excluded.error_type, duration_us = excluded.duration_us";
  s.postpone =
      "UPDATE retry_tasks SET status = 'PENDING', next_attempt_at = $1, lease_owner = NULL, lease_expires = NULL "
      "WHERE id = $2 AND status = 'IN_FLIGHT' AND lease_owner = $3";
  s.renew_lease =
      "UPDATE retry_tasks SET lease_expires = $1 WHERE id = $2 AND status = 'IN_FLIGHT' AND lease_owner = $3";
  s.get_task = select_task + "WHERE id = $1";
  s.attempts =
      "SELECT number, at, status, error_type, duration_us FROM attempt_logs WHERE task_id = $1 AND number > $2 "
      "ORDER BY number LIMIT $3";
}

/// What the admin API and the housekeeping ask of the tasks: list, replay, cancel, delete,
/// count, purge.
void task_admin_statements(statements& s, const std::string& columns) {
  std::string const select_task = "SELECT " + columns + " FROM retry_tasks ";
  s.list = select_task + filter_where;
  // Only a dead letter is replayed, only a pending task cancelled, only a dead letter deleted.
  s.replay = replay_set("$2") + "WHERE id = $1 AND status = 'DEAD_LETTERED'";
  s.replay_matching =
      replay_set("$7") + "WHERE id IN (SELECT id FROM retry_tasks " + filter_where + "{skip_locked}) RETURNING id";
  s.cancel = "UPDATE retry_tasks SET status = 'CANCELLED', next_attempt_at = $2 WHERE id = $1 AND status = 'PENDING'";
  s.delete_dead_letter = "DELETE FROM retry_tasks WHERE id = $1 AND status = 'DEAD_LETTERED'";
  // Run only where the schema has no cascade (statements::attempts_cascade).
  s.delete_attempts_of = "DELETE FROM attempt_logs WHERE task_id = $1";
  s.count_by_status = "SELECT status, count(*) FROM retry_tasks GROUP BY status";
  // A walk of the unended tasks, as count_by_status walks them all: every count_every.
  s.backlog =
      "SELECT coalesce(sum(CASE WHEN w < $1 THEN 1 ELSE 0 END), 0), coalesce(min(w), 0) FROM (SELECT CASE WHEN "
      "window_start > 0 THEN window_start ELSE created_at END AS w FROM retry_tasks WHERE status IN ('PENDING', "
      "'IN_FLIGHT')) AS unended";
  s.purge_tasks = std::string("DELETE FROM retry_tasks WHERE id IN ") + ended_rows;
  s.purge_attempts = std::string("DELETE FROM attempt_logs WHERE task_id IN ") + ended_rows;
}

/// Registered policies and the inbound gate's idempotency keys (R-6).
void registry_and_key_statements(statements& s) {
  s.put_policy = "INSERT INTO retry_policies (id, spec, created_at) VALUES ($1, $2, $3) ON CONFLICT (id) DO NOTHING";
  s.policy_spec = "SELECT spec FROM retry_policies WHERE id = $1";
  s.get_policy = "SELECT spec, created_at FROM retry_policies WHERE id = $1";
  s.key_known = "SELECT 1 FROM idempotency_keys WHERE scope_key = $1";
  s.find_key =
      "SELECT fingerprint, state, lease_expires, expires_at, status, headers, body FROM idempotency_keys "
      "WHERE scope_key = $1{for_update}";
  s.insert_key =
      "INSERT INTO idempotency_keys (scope_key, fingerprint, state, lease_expires, expires_at) "
      "VALUES ($1, $2, 'pending', $3, $3) ON CONFLICT (scope_key) DO NOTHING";
  s.reclaim_key =
      "INSERT INTO idempotency_keys (scope_key, fingerprint, state, lease_expires, expires_at) "
      "VALUES ($1, $2, 'pending', $3, $3) ON CONFLICT (scope_key) DO UPDATE SET fingerprint = excluded.fingerprint, "
      "state = 'pending', lease_expires = excluded.lease_expires, expires_at = excluded.expires_at, status = 0, "
      "headers = '', body = ''";
  s.complete_key =
      "UPDATE idempotency_keys SET state = 'complete', expires_at = $2, status = $3, headers = $4, body = $5 "
      "WHERE scope_key = $1 AND state = 'pending'";
  s.release_key = "DELETE FROM idempotency_keys WHERE scope_key = $1 AND state = 'pending'";
  s.purge_keys =
      "DELETE FROM idempotency_keys WHERE scope_key IN (SELECT scope_key FROM idempotency_keys WHERE state IN "
      "('complete', 'pending') AND expires_at <= $1 LIMIT $2{skip_locked})";
}

/// Every statement rewritten for `d` (render): parameter markers, casts, and the row locks only PostgreSQL takes.
void render_all(statements& s, dialect d) {
  for (auto* each :
       {&s.accept,          &s.claim_expired,   &s.claim_due,   &s.finish_attempt,     &s.log_attempt,
        &s.postpone,        &s.renew_lease,     &s.get_task,    &s.attempts,           &s.list,
        &s.replay,          &s.replay_matching, &s.cancel,      &s.delete_dead_letter, &s.delete_attempts_of,
        &s.count_by_status, &s.backlog,         &s.purge_tasks, &s.purge_attempts,     &s.put_policy,
        &s.policy_spec,     &s.get_policy,      &s.key_known,   &s.find_key,           &s.insert_key,
        &s.reclaim_key,     &s.complete_key,    &s.release_key, &s.purge_keys})
    *each = render(std::move(*each), d);
}

statements make(dialect d) {
  std::string const columns = support::task_columns;
  statements s;
  task_queue_statements(s, columns);
  task_admin_statements(s, columns);
  registry_and_key_statements(s);
  render_all(s, d);
  s.attempts_cascade = d == dialect::postgres;
  return s;
}

}  // namespace

const statements& statements_for(dialect d) {
  static const statements sqlite = make(dialect::sqlite);
  static const statements postgres = make(dialect::postgres);
  return d == dialect::sqlite ? sqlite : postgres;
}

}  // namespace rebound::store::sql
