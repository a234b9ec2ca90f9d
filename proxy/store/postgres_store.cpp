#include "proxy/store/postgres_store.hpp"

#include "proxy/store/postgres_connection.hpp"
#include "proxy/store/store_support.hpp"

#include <libpq-fe.h>
#include <poll.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <unordered_map>

namespace rebound::store {

using support::answer;
using support::failure;

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
constexpr const char* due_channel = "rebound_tasks_due";

}  // namespace

using detail::pg_connection;
using detail::pg_result;
using detail::trimmed;

postgres_store::postgres_store(options o) : options_(std::move(o)) {
  if (options_.pooler == pooler_mode::transaction) note_pooled("store.pooler: transaction");
  unsigned const n = std::max(1u, options_.pool);
  for (unsigned i = 0; i < n; ++i) threads_.emplace_back([this, i] { serve(i); });
  if (options_.pooler != pooler_mode::transaction) threads_.emplace_back([this] { listen(); });
}

postgres_store::~postgres_store() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  closing_ = true;
  wake_.notify_all();
  stop_.notify_all();
  for (auto& t : threads_) t.join();
  // Calls no connection could take (the database was down to the end) fail rather than vanish.
  for (auto& j : queue_) j.fail(store_error{"the store is closing"});
}

std::optional<std::string> postgres_store::unavailable() const {
  std::lock_guard lock(mutex_);
  if (connected_ > 0) return std::nullopt;
  return down_reason_;
}

void postgres_store::push(job j) {
  {
    std::unique_lock lock(mutex_);
    if (connected_ == 0) {
      // Nothing can be made durable now: fail at once (an accept answers 503), never wait
      // for a database that may stay away longer than the caller.
      auto const why = store_error{"store unavailable: " + down_reason_};
      lock.unlock();
      j.fail(why);
      return;
    }
    queue_.push_back(std::move(j));
  }
  wake_.notify_one();
}

void postgres_store::requeue(std::vector<job>& jobs) {
  {
    std::lock_guard lock(mutex_);
    for (auto it = jobs.rbegin(); it != jobs.rend(); ++it) queue_.push_front(std::move(*it));
  }
  jobs.clear();
  wake_.notify_one();
}

bool postgres_store::pause(std::chrono::milliseconds d) {
  std::unique_lock lock(mutex_);
  return !stop_.wait_for(lock, d, [this] { return stopping_; });
}

void postgres_store::connection_up() {
  bool first = false;
  {
    std::lock_guard lock(mutex_);
    first = connected_++ == 0;
  }
  if (first && options_.on_state) options_.on_state("");
}

void postgres_store::connection_lost(const std::string& why) {
  std::deque<job> orphans;
  bool last = false;
  {
    std::lock_guard lock(mutex_);
    down_reason_ = why;
    if (connected_ > 0 && --connected_ == 0) {
      last = true;
      orphans.swap(queue_);  // no connection is left to take them
    }
  }
  for (auto& j : orphans) j.fail(store_error{"store unavailable: " + why});
  if (last && options_.on_state) options_.on_state(why);
}

bool postgres_store::connect(pg_connection& c, bool migrate) {
  c.close();
  c.failed = false;
  // Earlier keywords are overridden by the DSN's own; the password comes last, from its file.
  std::vector<const char*> keys = {"connect_timeout", "application_name", "keepalives_idle", "keepalives_interval",
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
  PQsetNoticeProcessor(c.raw, [](void*, const char*) {}, nullptr);
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

namespace {
/// How many queued calls one transaction carries at most.
constexpr std::size_t max_group = 256;

/// A wait drawn from [d/2, d]: instances of a fleet that lost the database together do not
/// come back in step.
std::chrono::milliseconds jittered(std::chrono::milliseconds d, std::minstd_rand& rng) {
  std::uniform_int_distribution<std::int64_t> pick(d.count() / 2, d.count());
  return std::chrono::milliseconds(pick(rng));
}
}  // namespace

void postgres_store::serve(unsigned index) {
  pg_connection c;
  c.closing = &closing_;
  c.answer_within = options_.answer_within;
  std::minstd_rand rng(static_cast<std::minstd_rand::result_type>(
      std::chrono::steady_clock::now().time_since_epoch().count() + index));
  auto wait = options_.reconnect_min;
  std::vector<job> jobs;
  for (;;) {
    if (!c.up()) {
      if (c.counted) {
        // Once at once, still counted: after a server restart every idle connection is
        // stale, and one reconnect is all each needs.
        if (connect(c, true)) continue;
        c.counted = false;
        connection_lost(c.error);
      }
      {
        std::lock_guard lock(mutex_);
        if (stopping_) return;
      }
      if (connect(c, true)) {
        c.counted = true;
        wait = options_.reconnect_min;
        connection_up();
      } else {
        {
          std::lock_guard lock(mutex_);
          if (connected_ == 0) down_reason_ = c.error;
        }
        if (!pause(jittered(wait, rng))) return;
        wait = std::min(wait * 2, options_.reconnect_max);
        continue;
      }
    }
    jobs.clear();
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) break;  // stopping, and nothing left to do
      while (!queue_.empty() && jobs.size() < max_group) {
        jobs.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
    }
    run_group(c, jobs);
  }
  if (c.counted) {
    std::lock_guard lock(mutex_);
    --connected_;
  }
}

void postgres_store::run_group(pg_connection& c, std::vector<job>& jobs) {
  auto fail_all = [&jobs](std::size_t from, const std::string& why) {
    for (auto i = from; i < jobs.size(); ++i) jobs[i].fail(store_error{why});
  };
  // Everything that queued while the last transaction was on its way goes in one.
  std::vector<reply> replies;
  c.failed = false;
  c.notify = false;
  c.unnamed = c.unnamed || pooled_.load();
  if (!c.begin()) {
    if (c.lost) {
      // Nothing of theirs reached the server: an idle connection the server dropped (it
      // restarted) is found out here, and its calls go to one that works, or to this one
      // once reconnected, rather than fail.
      requeue(jobs);
      return;
    }
    return fail_all(0, "store unavailable: " + c.error);
  }
  for (auto& j : jobs) {
    replies.push_back(j.run(c));
    if (c.failed) break;
  }
  if (!c.failed) {
    bool const due = c.notify;
    if (due) c.command((std::string("NOTIFY ") + due_channel).c_str());
    auto const started = std::chrono::steady_clock::now();
    if (!c.failed && c.command("COMMIT")) {
      commits_.fetch_add(1, std::memory_order_relaxed);
      if (options_.on_commit) options_.on_commit(std::chrono::steady_clock::now() - started, jobs.size());
      if (due) tasks_due(due_from::local);  // this instance starts what it accepted itself
      for (auto& r : replies) r(std::nullopt);
      return;
    }
  }
  // A COMMIT whose answer was lost may have committed: the callers hear a failure, and an
  // accept that did commit is delivered anyway (at least once), never the reverse.
  if (c.lost) return fail_all(0, "store unavailable: " + c.error);
  c.failed = false;
  c.command("ROLLBACK");
  if (c.clashed) {
    // A pooler detection missed (or `pooler: none` put in front of one): from now on, and
    // for the calls below, statements go unnamed.
    c.clashed = false;
    c.unnamed = true;
    note_pooled("a prepared statement was missing or already there: another client used its server connection");
  }
  // One call failed and PostgreSQL aborted the transaction for all: each again in its own,
  // so the one that failed fails alone.
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    c.failed = false;
    c.notify = false;
    if (!c.begin()) return fail_all(i, "store unavailable: " + c.error);
    auto r = jobs[i].run(c);
    if (c.failed) {
      if (c.lost) return fail_all(i, "store unavailable: " + c.error);
      c.failed = false;
      c.command("ROLLBACK");
      r(std::nullopt);  // the reply carries the statement's error
    } else {
      bool const due = c.notify;
      if (due) c.command((std::string("NOTIFY ") + due_channel).c_str());
      if (!c.failed && c.command("COMMIT")) {
        commits_.fetch_add(1, std::memory_order_relaxed);
        if (due) tasks_due(due_from::local);
        r(std::nullopt);
      } else {
        r(store_error{"commit failed: " + c.error});
        if (c.lost) return fail_all(i + 1, "store unavailable: " + c.error);
        c.failed = false;
        c.command("ROLLBACK");
      }
    }
  }
}

void postgres_store::listen() {
  pg_connection c;
  c.closing = &closing_;
  c.answer_within = options_.answer_within;
  std::minstd_rand rng(static_cast<std::minstd_rand::result_type>(
      std::chrono::steady_clock::now().time_since_epoch().count()));
  auto wait = options_.reconnect_min;
  auto wake_scheduler = [this] { tasks_due(due_from::fleet); };
  for (;;) {
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return;
    }
    if (!c.up()) {
      bool const connected = connect(c, false);
      if (connected && pooled_.load()) {
        // A transaction-mode pooler takes LISTEN and then hands its server connection to
        // others: nothing would ever arrive. The scheduler's poll is the wake-up instead.
        c.close();
        return;
      }
      if (!connected || !c.command((std::string("LISTEN ") + due_channel).c_str())) {
        c.close();
        if (!pause(jittered(wait, rng))) return;
        wait = std::min(wait * 2, options_.reconnect_max);
        continue;
      }
      wait = options_.reconnect_min;
      wake_scheduler();  // tasks may have become due while nobody listened
      listening_ = true;
    }
    // Short polls, so a closing store is not held up by an idle database.
    pollfd fd{PQsocket(c.raw), POLLIN, 0};
    if (::poll(&fd, 1, 250) < 0) continue;
    if (!PQconsumeInput(c.raw) || PQstatus(c.raw) == CONNECTION_BAD) {
      listening_ = false;
      c.close();
      continue;
    }
    bool due = false;
    while (PGnotify* n = PQnotifies(c.raw)) {
      due = true;
      PQfreemem(n);
    }
    if (due) wake_scheduler();
  }
}

void postgres_store::measure(pg_connection& c) {
  using namespace std::chrono;
  auto const now = duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
  auto last = measured_at_ms_.load(std::memory_order_relaxed);
  if (now - last < 5000 || !measured_at_ms_.compare_exchange_strong(last, now)) return;
  auto r = c.run("SELECT pg_database_size(current_database())", {});
  // A failed measure fails the call it rode with (the transaction is aborted): rare, and
  // the call is answered as any store failure is.
  if (!c.failed && r.rows() > 0) guard_.measured(static_cast<std::uint64_t>(r.integer(0, 0)));
}

std::optional<store_error> postgres_store::refuse_new(pg_connection& c) {
  measure(c);
  if (c.failed) return store_error{c.error};
  return guard_.refuse_new();
}

}  // namespace rebound::store
