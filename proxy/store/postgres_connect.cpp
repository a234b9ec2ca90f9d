#include "proxy/store/postgres_connection.hpp"
#include "proxy/store/postgres_store.hpp"

#include <libpq-fe.h>

#include <cstdlib>
#include <mutex>

// How a store thread's connection is made ready: libpq's connect (the password from its
// file), finding a transaction-mode pooler in between, and the schema brought up to date
// under an advisory lock, so a fleet that starts at once migrates once.
namespace rebound::store {

using detail::pg_connection;
using detail::trimmed;

namespace {

/// Each entry moves the schema one version on; entry i takes version i to i + 1. The model
/// is the embedded store's; the indexes are partial where a claim walks them, and attempts go
/// with their task (ON DELETE CASCADE).
constexpr const char* migrations[] = {
    R"sql(
CREATE TABLE retry_tasks (
  id              text PRIMARY KEY,
  idempotency_key text NOT NULL,
  dependency      text NOT NULL,
  method          text NOT NULL,
  target          text NOT NULL,
  headers         bytea NOT NULL,  -- name NUL value NUL ...
  body            bytea NOT NULL,
  policy_id       text NOT NULL,
  attempts        integer NOT NULL,
  next_attempt_at bigint NOT NULL,  -- milliseconds since the Unix epoch; for an ended task, when it ended
  created_at      bigint NOT NULL,
  status          text NOT NULL,
  lease_owner     text,
  lease_expires   bigint,
  window_start    bigint NOT NULL DEFAULT 0,  -- 0: created_at
  attempts_before integer NOT NULL DEFAULT 0
) WITH (fillfactor = 80);  -- room for the updates of a claim and an attempt on the row's own page
-- Claims walk these two: the queue's hot path keeps them small and the table's dead rows few.
CREATE INDEX retry_tasks_due ON retry_tasks (next_attempt_at) WHERE status = 'PENDING';
CREATE INDEX retry_tasks_lease ON retry_tasks (lease_expires) WHERE status = 'IN_FLIGHT';
CREATE INDEX retry_tasks_status_id ON retry_tasks (status, id);
CREATE INDEX retry_tasks_ended ON retry_tasks (status, next_attempt_at)
  WHERE status IN ('SUCCEEDED', 'CANCELLED', 'EXHAUSTED');
-- A queue table churns: vacuum it after 1% of its rows changed, not the default 20%.
ALTER TABLE retry_tasks SET (autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_cost_delay = 0);
CREATE TABLE attempt_logs (
  task_id     text NOT NULL REFERENCES retry_tasks (id) ON DELETE CASCADE,
  number      integer NOT NULL,
  at          bigint NOT NULL,
  status      integer NOT NULL,
  error_type  text NOT NULL,
  duration_us bigint NOT NULL,
  PRIMARY KEY (task_id, number)
);
CREATE TABLE retry_policies (
  id         text PRIMARY KEY,
  spec       text NOT NULL,
  created_at bigint NOT NULL
);
CREATE TABLE idempotency_keys (
  scope_key     text PRIMARY KEY,
  fingerprint   text NOT NULL,
  state         text NOT NULL,  -- pending | complete
  lease_expires bigint NOT NULL,
  expires_at    bigint NOT NULL,
  status        integer NOT NULL DEFAULT 0,
  headers       bytea NOT NULL DEFAULT '',
  body          bytea NOT NULL DEFAULT ''
);
CREATE INDEX idempotency_keys_expiry ON idempotency_keys (expires_at);
)sql",
};

/** The id this database is known by in the metrics (task_store::identity), made once under
    the migration lock. Not a migration: instances of an older rebound in the fleet keep
    connecting through a rolling upgrade (a schema version they do not know would stop them),
    and find nothing changed. */
constexpr const char* made_once_id = R"sql(
CREATE TABLE IF NOT EXISTS rebound_store (id text NOT NULL);
INSERT INTO rebound_store SELECT substr(md5(random()::text || clock_timestamp()::text), 1, 12)
  WHERE NOT EXISTS (SELECT 1 FROM rebound_store);
)sql";
constexpr int migration_count = static_cast<int>(std::size(migrations));
static_assert(migration_count == postgres_store::schema_version);

/// The advisory lock a fleet's instances take to migrate one at a time ("rebound" in ASCII).
constexpr const char* migration_lock = "SELECT pg_advisory_xact_lock(7450489001366074724)";

}  // namespace

bool postgres_store::connect(pg_connection& c, bool migrate) {
  c.close();
  c.failed = false;
  // Earlier keywords are overridden by the DSN's own; the password comes last, from its file.
  std::vector<const char*> keys = {"connect_timeout",  "application_name", "keepalives_idle", "keepalives_interval",
                                   "keepalives_count", "tcp_user_timeout", "dbname"};
  std::vector<const char*> values = {"5", "rebound", "10", "5", "3", "15000", options_.dsn.c_str()};
  if (!options_.password.empty()) {
    keys.push_back("password");
    values.push_back(options_.password.c_str());
  }
  keys.push_back(nullptr);
  values.push_back(nullptr);
  c.raw = PQconnectdbParams(keys.data(), values.data(), 1);
  if (!c.raw || PQstatus(c.raw) != CONNECTION_OK) {
    // libpq's message names host, port and cause; never the password.
    c.error = c.raw ? trimmed(PQerrorMessage(c.raw)) : "out of memory";
    c.close();
    return false;
  }
  // libpq prints the server's NOTICEs ("relation ... already exists, skipping" from the
  // migrations' IF NOT EXISTS) to stderr, outside the JSON log. They are not errors: dropped.
  PQsetNoticeProcessor(
      c.raw, [](void*, const char*) {}, nullptr);
  if (!find_pooler(c)) return fail_connect(c);
  if (!migrate) return true;
  // Under the advisory lock (of the transaction, which a transaction-mode pooler keeps on
  // one server connection), so instances starting together migrate once, one after another.
  if (!c.begin() || !c.command(migration_lock) ||
      !c.command("CREATE TABLE IF NOT EXISTS rebound_schema (version integer NOT NULL)"))
    return fail_connect(c);
  auto v = c.run("SELECT version FROM rebound_schema", {});
  if (c.failed) return fail_connect(c);
  int version = v.rows() > 0 ? static_cast<int>(v.integer(0, 0)) : 0;
  if (v.rows() == 0 && !c.command("INSERT INTO rebound_schema VALUES (0)")) return fail_connect(c);
  if (version > migration_count) {
    c.error = "the database's schema version " + std::to_string(version) + " is newer than this rebound understands (" +
              std::to_string(migration_count) + ")";
    c.command("ROLLBACK");
    c.close();
    return false;
  }
  for (; version < migration_count; ++version)
    if (!c.command(migrations[version])) {
      c.error = "migration to schema version " + std::to_string(version + 1) + " failed: " + c.error;
      return fail_connect(c);
    }
  auto const set_version = "UPDATE rebound_schema SET version = " + std::to_string(version);
  if (!c.command(set_version.c_str()) || !c.command(made_once_id) || !c.command("COMMIT")) return fail_connect(c);
  auto id = c.run("SELECT id FROM rebound_store", {});
  if (c.failed || id.rows() != 1) return fail_connect(c);
  {
    std::lock_guard lock(mutex_);
    identity_ = "postgresql/" + id.text(0, 0);
  }
  c.failed = false;
  return true;
}

std::optional<std::string> postgres_store::identity() const {
  std::lock_guard lock(mutex_);
  if (identity_.empty()) return std::nullopt;
  return identity_;
}

bool postgres_store::find_pooler(pg_connection& c) {
  if (options_.pooler == pooler_mode::detect && !pooled_.load()) {
    // PostgreSQL tells a client its backend's pid at connect; a pooler tells its own cancel
    // key instead, as it may hand the client any server connection: the two differ.
    auto r = c.simple("SELECT pg_backend_pid()");
    if (!r.ok() || r.rows() != 1) return false;
    if (std::atoll(PQgetvalue(r.raw(), 0, 0)) != PQbackendPID(c.raw))
      note_pooled("the backend pid the server reports differs from the one given at connect");
  }
  c.unnamed = pooled_.load();
  return true;
}

void postgres_store::note_pooled(const std::string& evidence) {
  if (pooled_.exchange(true)) return;
  if (options_.on_pooled) options_.on_pooled(evidence);
}

std::optional<std::string> postgres_store::detail() const {
  if (!pooled_.load()) return std::nullopt;
  return std::string("postgres through a transaction-mode pooler: statements unnamed, no LISTEN (idle instances ") +
         "poll for due tasks about once a second)";
}

bool postgres_store::fail_connect(pg_connection& c) {
  c.close();
  return false;
}

}  // namespace rebound::store
