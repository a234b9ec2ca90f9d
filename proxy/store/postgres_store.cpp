#include "proxy/store/postgres_store.hpp"

#include "proxy/store/store_support.hpp"

#include <libpq-fe.h>
#include <poll.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <unordered_map>

namespace rebound::store {

using support::answer;
using support::decode_headers;
using support::encode_headers;
using support::failure;
using support::from_ms;
using support::task_columns;
using support::to_ms;

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
constexpr int migration_count = static_cast<int>(std::size(migrations));
static_assert(migration_count == postgres_store::schema_version);

/// The advisory lock a fleet's instances take to migrate one at a time ("rebound" in ASCII).
constexpr const char* migration_lock = "SELECT pg_advisory_xact_lock(7450489001366074724)";
constexpr const char* due_channel = "rebound_tasks_due";

/// A parameter of a statement: text, or bytes sent in binary (bytea).
struct param {
  std::string value;
  bool binary = false;
};
param text(std::string_view v) { return {std::string(v), false}; }
param number(std::int64_t v) { return {std::to_string(v), false}; }
param bytes(std::string_view v) { return {std::string(v), true}; }

std::string trimmed(const char* message) {
  std::string s = message ? message : "";
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace

namespace detail {

/// One statement's rows, in binary format: texts are their bytes, integers big-endian.
class pg_result {
 public:
  explicit pg_result(PGresult* r = nullptr) : r_(r) {}
  ~pg_result() { PQclear(r_); }
  pg_result(pg_result&& o) noexcept : r_(std::exchange(o.r_, nullptr)) {}
  pg_result& operator=(pg_result&&) = delete;
  pg_result(const pg_result&) = delete;

  bool ok() const {
    auto const s = PQresultStatus(r_);
    return r_ && (s == PGRES_TUPLES_OK || s == PGRES_COMMAND_OK);
  }
  int rows() const { return PQntuples(r_); }
  const char* message() const { return r_ ? PQresultErrorMessage(r_) : ""; }
  std::string_view sqlstate() const {
    char const* s = r_ ? PQresultErrorField(r_, PG_DIAG_SQLSTATE) : nullptr;
    return s ? s : "";
  }
  /// Rows a command changed (UPDATE, DELETE, INSERT).
  std::uint64_t changes() const {
    char const* n = PQcmdTuples(r_);
    return n && *n ? std::strtoull(n, nullptr, 10) : 0;
  }
  std::string text(int row, int col) const {
    return std::string(PQgetvalue(r_, row, col), static_cast<std::size_t>(PQgetlength(r_, row, col)));
  }
  std::int64_t integer(int row, int col) const {
    if (PQgetisnull(r_, row, col)) return 0;
    auto const* p = reinterpret_cast<const unsigned char*>(PQgetvalue(r_, row, col));
    int const n = PQgetlength(r_, row, col);
    std::uint64_t v = 0;
    for (int i = 0; i < n; ++i) v = (v << 8) | p[i];
    // Sign-extend the 2- and 4-byte types.
    if (n < 8 && n > 0 && (p[0] & 0x80)) v |= ~std::uint64_t{0} << (8 * n);
    return static_cast<std::int64_t>(v);
  }

 private:
  PGresult* r_;
};

/** A connection and the statements prepared on it, used by one store thread. A statement
    that fails marks the transaction failed (PostgreSQL aborts it) and, when the server is
    gone, the connection lost. */
class pg_connection {
 public:
  PGconn* raw = nullptr;
  bool failed = false;  ///< a statement of the current transaction failed
  bool lost = false;    ///< the server is gone: reconnect
  bool notify = false;  ///< the current transaction made tasks due: NOTIFY before COMMIT
  bool counted = false; ///< counted in the store's connections up
  std::string error;

  pg_connection() = default;
  pg_connection(const pg_connection&) = delete;
  pg_connection& operator=(const pg_connection&) = delete;
  ~pg_connection() { close(); }

  bool up() const { return raw && !lost; }
  void close() {
    if (raw) PQfinish(raw);
    raw = nullptr;
    prepared_.clear();
    lost = false;
  }

  /// `sql` prepared once on this connection, run with `params`.
  pg_result run(const std::string& sql, const std::vector<param>& params) {
    if (failed || !raw) return pg_result();
    auto it = prepared_.find(sql);
    if (it == prepared_.end()) {
      std::string name = "s" + std::to_string(prepared_.size());
      pg_result p(PQprepare(raw, name.c_str(), sql.c_str(), static_cast<int>(params.size()), nullptr));
      if (!p.ok()) {
        note_failure(p);
        return pg_result();
      }
      it = prepared_.emplace(sql, std::move(name)).first;
    }
    std::vector<const char*> values;
    std::vector<int> lengths, formats;
    for (auto const& p : params) {
      values.push_back(p.value.data());
      lengths.push_back(static_cast<int>(p.value.size()));
      formats.push_back(p.binary ? 1 : 0);
    }
    pg_result r(PQexecPrepared(raw, it->second.c_str(), static_cast<int>(params.size()), values.data(),
                               lengths.data(), formats.data(), 1));
    if (!r.ok()) note_failure(r);
    return r;
  }

  /// A statement with no parameters (BEGIN, COMMIT, SET): true when it succeeded.
  bool command(const char* sql) {
    if (!raw) return false;
    pg_result r(PQexec(raw, sql));
    if (r.ok()) return true;
    note_failure(r);
    return false;
  }

 private:
  void note_failure(const pg_result& r) {
    failed = true;
    error = trimmed(r.message());
    if (error.empty()) error = trimmed(PQerrorMessage(raw));
    if (error.empty()) error = "the database refused the statement";
    // Class 08 (connection exception) and 57P0x (the server shut down or is starting): the
    // connection is of no further use even when libpq has not noticed yet.
    auto const state = r.sqlstate();
    lost = PQstatus(raw) == CONNECTION_BAD || state.starts_with("08") || state.starts_with("57P");
  }

  std::unordered_map<std::string, std::string> prepared_;
};

}  // namespace detail

using detail::pg_connection;
using detail::pg_result;

namespace {

retry_task read_task(const pg_result& r, int row) {
  retry_task t;
  t.id = r.text(row, 0);
  t.idempotency_key = r.text(row, 1);
  t.dependency = r.text(row, 2);
  t.method = r.text(row, 3);
  t.target = r.text(row, 4);
  t.headers = decode_headers(r.text(row, 5));
  t.body = r.text(row, 6);
  t.policy_id = r.text(row, 7);
  t.attempts = static_cast<unsigned>(r.integer(row, 8));
  t.next_attempt_at = from_ms(r.integer(row, 9));
  t.created_at = from_ms(r.integer(row, 10));
  t.status = parse_task_status(r.text(row, 11)).value_or(task_status::pending);
  auto const window = r.integer(row, 12);
  t.window_start = window > 0 ? from_ms(window) : t.created_at;
  t.attempts_before = static_cast<unsigned>(r.integer(row, 13));
  return t;
}

std::vector<retry_task> read_tasks(const pg_result& r) {
  std::vector<retry_task> out;
  for (int i = 0; i < r.rows(); ++i) out.push_back(read_task(r, i));
  return out;
}

const std::string select_task = std::string("SELECT ") + task_columns + " FROM retry_tasks ";

/// The WHERE of a task_filter over retry_tasks, parameters $1 to $6 (filter_params).
constexpr const char* filter_where =
    "WHERE status = $1::text AND ($2::text = '' OR dependency = $2::text) AND ($3::bigint < 0 OR next_attempt_at "
    ">= $3::bigint) AND ($4::bigint < 0 OR next_attempt_at < $4::bigint) AND id > $5::text ORDER BY id "
    "LIMIT $6::bigint";

std::vector<param> filter_params(const task_filter& f, task_status status) {
  return {text(to_string(status)),
          text(f.dependency),
          number(f.since ? to_ms(*f.since) : -1),
          number(f.until ? to_ms(*f.until) : -1),
          text(f.after),
          number(static_cast<std::int64_t>(f.limit))};
}

}  // namespace

postgres_store::postgres_store(options o) : options_(std::move(o)) {
  unsigned const n = std::max(1u, options_.pool);
  for (unsigned i = 0; i < n; ++i) threads_.emplace_back([this, i] { serve(i); });
  threads_.emplace_back([this] { listen(); });
}

postgres_store::~postgres_store() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
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

void postgres_store::set_due_listener(std::function<void()> wake) {
  std::lock_guard lock(mutex_);
  due_listener_ = std::move(wake);
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

template <class T, class Work>
void postgres_store::enqueue(callback<T> done, Work work) {
  push(job{[done, work](pg_connection& c) { return work(c, done); },
           [done](const store_error& e) { done(e, T{}); }});
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
  // A statement or transaction left hanging would hold the xmin horizon and every lock it
  // took: the server ends them, and the connection reconnects.
  if (!c.command("SET statement_timeout = '30s'; SET lock_timeout = '10s'; "
                 "SET idle_in_transaction_session_timeout = '60s'")) {
    c.close();
    return false;
  }
  if (!migrate) return true;
  // Under the advisory lock, so instances starting together migrate once, one after another.
  if (!c.command("BEGIN") || !c.command(migration_lock) ||
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
  if (!c.command(set_version.c_str()) || !c.command("COMMIT")) return fail_connect(c);
  c.failed = false;
  return true;
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
  if (!c.command("BEGIN")) {
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
    if (c.notify) c.command((std::string("NOTIFY ") + due_channel).c_str());
    auto const started = std::chrono::steady_clock::now();
    if (!c.failed && c.command("COMMIT")) {
      commits_.fetch_add(1, std::memory_order_relaxed);
      if (options_.on_commit) options_.on_commit(std::chrono::steady_clock::now() - started, jobs.size());
      for (auto& r : replies) r(std::nullopt);
      return;
    }
  }
  // A COMMIT whose answer was lost may have committed: the callers hear a failure, and an
  // accept that did commit is delivered anyway (at least once), never the reverse.
  if (c.lost) return fail_all(0, "store unavailable: " + c.error);
  c.failed = false;
  c.command("ROLLBACK");
  // One call failed and PostgreSQL aborted the transaction for all: each again in its own,
  // so the one that failed fails alone.
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    c.failed = false;
    c.notify = false;
    if (!c.command("BEGIN")) return fail_all(i, "store unavailable: " + c.error);
    auto r = jobs[i].run(c);
    if (c.failed) {
      if (c.lost) return fail_all(i, "store unavailable: " + c.error);
      c.failed = false;
      c.command("ROLLBACK");
      r(std::nullopt);  // the reply carries the statement's error
    } else {
      if (c.notify) c.command((std::string("NOTIFY ") + due_channel).c_str());
      if (!c.failed && c.command("COMMIT")) {
        commits_.fetch_add(1, std::memory_order_relaxed);
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
  std::minstd_rand rng(static_cast<std::minstd_rand::result_type>(
      std::chrono::steady_clock::now().time_since_epoch().count()));
  auto wait = options_.reconnect_min;
  // Called under the lock (the listener only posts), so once set_due_listener({}) returned
  // no call is left under way into an executor that may be gone.
  auto wake_scheduler = [this] {
    std::lock_guard lock(mutex_);
    if (due_listener_) due_listener_();
  };
  for (;;) {
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return;
    }
    if (!c.up()) {
      if (!connect(c, false) || !c.command((std::string("LISTEN ") + due_channel).c_str())) {
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

void postgres_store::submit_accept(retry_task task, callback<bool> done) {
  enqueue<bool>(std::move(done), [this, task = std::move(task)](pg_connection& c, const callback<bool>& done) {
    if (auto refused = refuse_new(c)) return answer<bool>(done, std::move(refused), false);
    static const std::string sql =
        "INSERT INTO retry_tasks (id, idempotency_key, dependency, method, target, headers, body, policy_id, "
        "attempts, next_attempt_at, created_at, status) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)";
    c.run(sql, {text(task.id), text(task.idempotency_key), text(task.dependency), text(task.method),
                text(task.target), bytes(encode_headers(task.headers)), bytes(task.body), text(task.policy_id),
                number(task.attempts), number(to_ms(task.next_attempt_at)), number(to_ms(task.created_at)),
                text(to_string(task.status))});
    if (c.failed) return failure<bool>(done, c.error);
    c.notify = true;
    return answer<bool>(done, std::nullopt, true);
  });
}

void postgres_store::submit_claim(std::string owner, wall_clock::time_point now, wall_clock::time_point lease_until,
                                  std::size_t limit, callback<std::vector<retry_task>> done) {
  enqueue<std::vector<retry_task>>(std::move(done), [this, owner = std::move(owner), now, lease_until, limit](
                                                        pg_connection& c, const callback<std::vector<retry_task>>& done) {
    // Claims come every poll: what keeps the size (and /readyz) current while nothing new
    // arrives, as deliveries and retention make room.
    measure(c);
    if (c.failed) return failure<std::vector<retry_task>>(done, c.error);
    // SKIP LOCKED: rows another instance is claiming right now are passed over, not waited
    // for, so a fleet's claims never queue behind each other. The leases that ran out first
    // (their holder died mid-attempt; the attempt count is kept), then the due tasks.
    static const std::string expired =
        std::string(
            "UPDATE retry_tasks SET lease_owner = $1, lease_expires = $2 WHERE id IN (SELECT id FROM retry_tasks "
            "WHERE status = 'IN_FLIGHT' AND lease_expires <= $3 ORDER BY lease_expires LIMIT $4 "
            "FOR UPDATE SKIP LOCKED) RETURNING ") +
        task_columns;
    static const std::string due =
        std::string(
            "UPDATE retry_tasks SET status = 'IN_FLIGHT', lease_owner = $1, lease_expires = $2 WHERE id IN "
            "(SELECT id FROM retry_tasks WHERE status = 'PENDING' AND next_attempt_at <= $3 "
            "ORDER BY next_attempt_at LIMIT $4 FOR UPDATE SKIP LOCKED) RETURNING ") +
        task_columns;
    std::vector<retry_task> out;
    for (auto const* sql : {&expired, &due}) {
      if (out.size() >= limit) break;
      auto r = c.run(*sql, {text(owner), number(to_ms(lease_until)), number(to_ms(now)),
                            number(static_cast<std::int64_t>(limit - out.size()))});
      if (c.failed) return failure<std::vector<retry_task>>(done, c.error);
      for (int i = 0; i < r.rows(); ++i) out.push_back(read_task(r, i));
    }
    for (auto& t : out) t.status = task_status::in_flight;
    return answer<std::vector<retry_task>>(done, std::nullopt, std::move(out));
  });
}

void postgres_store::submit_finish_attempt(std::string owner, attempt_log attempt, task_status next,
                                           wall_clock::time_point next_attempt_at, callback<bool> done) {
  enqueue<bool>(std::move(done), [owner = std::move(owner), attempt = std::move(attempt), next, next_attempt_at](
                                     pg_connection& c, const callback<bool>& done) {
    auto u = c.run(
        "UPDATE retry_tasks SET status = $1, attempts = $2, next_attempt_at = $3, lease_owner = NULL, "
        "lease_expires = NULL WHERE id = $4 AND status = 'IN_FLIGHT' AND lease_owner = $5",
        {text(to_string(next)), number(attempt.number), number(to_ms(next_attempt_at)), text(attempt.task_id),
         text(owner)});
    if (c.failed) return failure<bool>(done, c.error);
    if (u.changes() == 0) return answer<bool>(done, std::nullopt, false);  // the lease was lost
    c.run(
        "INSERT INTO attempt_logs (task_id, number, at, status, error_type, duration_us) VALUES ($1, $2, $3, $4, $5, "
        "$6) ON CONFLICT (task_id, number) DO UPDATE SET at = EXCLUDED.at, status = EXCLUDED.status, "
        "error_type = EXCLUDED.error_type, duration_us = EXCLUDED.duration_us",
        {text(attempt.task_id), number(attempt.number), number(to_ms(attempt.at)), number(attempt.status),
         text(attempt.error_type), number(attempt.duration.count())});
    if (c.failed) return failure<bool>(done, c.error);
    return answer<bool>(done, std::nullopt, true);
  });
}

void postgres_store::submit_postpone(std::string owner, std::string id, wall_clock::time_point until,
                                     callback<bool> done) {
  enqueue<bool>(std::move(done), [owner = std::move(owner), id = std::move(id), until](pg_connection& c,
                                                                                       const callback<bool>& done) {
    auto u = c.run(
        "UPDATE retry_tasks SET status = 'PENDING', next_attempt_at = $1, lease_owner = NULL, lease_expires = NULL "
        "WHERE id = $2 AND status = 'IN_FLIGHT' AND lease_owner = $3",
        {number(to_ms(until)), text(id), text(owner)});
    if (c.failed) return failure<bool>(done, c.error);
    return answer<bool>(done, std::nullopt, u.changes() > 0);
  });
}

void postgres_store::submit_get(std::string id, callback<std::optional<retry_task>> done) {
  enqueue<std::optional<retry_task>>(
      std::move(done), [id = std::move(id)](pg_connection& c, const callback<std::optional<retry_task>>& done) {
        auto r = c.run(select_task + "WHERE id = $1", {text(id)});
        if (c.failed) return failure<std::optional<retry_task>>(done, c.error);
        if (r.rows() == 0) return answer<std::optional<retry_task>>(done, std::nullopt, std::nullopt);
        return answer<std::optional<retry_task>>(done, std::nullopt, read_task(r, 0));
      });
}

void postgres_store::submit_attempts(std::string id, unsigned after, std::size_t limit,
                                     callback<std::vector<attempt_log>> done) {
  enqueue<std::vector<attempt_log>>(
      std::move(done),
      [id = std::move(id), after, limit](pg_connection& c, const callback<std::vector<attempt_log>>& done) {
        auto r = c.run(
            "SELECT number, at, status, error_type, duration_us FROM attempt_logs WHERE task_id = $1 AND number > $2 "
            "ORDER BY number LIMIT $3",
            {text(id), number(after), number(static_cast<std::int64_t>(limit))});
        if (c.failed) return failure<std::vector<attempt_log>>(done, c.error);
        std::vector<attempt_log> out;
        for (int i = 0; i < r.rows(); ++i)
          out.push_back(attempt_log{id, static_cast<unsigned>(r.integer(i, 0)), from_ms(r.integer(i, 1)),
                                    static_cast<unsigned>(r.integer(i, 2)), r.text(i, 3),
                                    std::chrono::microseconds(r.integer(i, 4))});
        return answer<std::vector<attempt_log>>(done, std::nullopt, std::move(out));
      });
}

void postgres_store::submit_list(task_filter filter, callback<std::vector<retry_task>> done) {
  enqueue<std::vector<retry_task>>(
      std::move(done), [filter = std::move(filter)](pg_connection& c, const callback<std::vector<retry_task>>& done) {
        auto r = c.run(select_task + filter_where, filter_params(filter, filter.status));
        if (c.failed) return failure<std::vector<retry_task>>(done, c.error);
        return answer<std::vector<retry_task>>(done, std::nullopt, read_tasks(r));
      });
}

namespace {
/// A replayed dead letter: due at once, with a fresh R-2/R-3 window, its history kept.
constexpr const char* replay_set =
    "UPDATE retry_tasks SET status = 'PENDING', next_attempt_at = $7, window_start = $7, attempts_before = attempts ";
}

void postgres_store::submit_replay(std::string id, wall_clock::time_point now, callback<bool> done) {
  enqueue<bool>(std::move(done), [id = std::move(id), now](pg_connection& c, const callback<bool>& done) {
    auto u = c.run(
        "UPDATE retry_tasks SET status = 'PENDING', next_attempt_at = $2, window_start = $2, attempts_before = "
        "attempts WHERE id = $1 AND status = 'DEAD_LETTERED'",
        {text(id), number(to_ms(now))});
    if (c.failed) return failure<bool>(done, c.error);
    c.notify = u.changes() > 0;
    return answer<bool>(done, std::nullopt, u.changes() > 0);
  });
}

void postgres_store::submit_replay_matching(task_filter filter, wall_clock::time_point now,
                                            callback<std::vector<std::string>> done) {
  enqueue<std::vector<std::string>>(
      std::move(done),
      [filter = std::move(filter), now](pg_connection& c, const callback<std::vector<std::string>>& done) {
        auto params = filter_params(filter, task_status::dead_lettered);
        params.push_back(number(to_ms(now)));
        auto r = c.run(std::string(replay_set) + "WHERE id IN (SELECT id FROM retry_tasks " + filter_where +
                           " FOR UPDATE SKIP LOCKED) RETURNING id",
                       params);
        if (c.failed) return failure<std::vector<std::string>>(done, c.error);
        std::vector<std::string> ids;
        for (int i = 0; i < r.rows(); ++i) ids.push_back(r.text(i, 0));
        std::sort(ids.begin(), ids.end());  // RETURNING keeps no order; the cursor is the last id
        c.notify = !ids.empty();
        return answer<std::vector<std::string>>(done, std::nullopt, std::move(ids));
      });
}

void postgres_store::submit_cancel(std::string id, wall_clock::time_point now, callback<bool> done) {
  enqueue<bool>(std::move(done), [id = std::move(id), now](pg_connection& c, const callback<bool>& done) {
    // next_attempt_at becomes when it ended, as for every finished task (submit_purge).
    auto u = c.run("UPDATE retry_tasks SET status = 'CANCELLED', next_attempt_at = $2 WHERE id = $1 AND status = "
                   "'PENDING'",
                   {text(id), number(to_ms(now))});
    if (c.failed) return failure<bool>(done, c.error);
    return answer<bool>(done, std::nullopt, u.changes() > 0);
  });
}

void postgres_store::submit_delete_dead_letter(std::string id, callback<bool> done) {
  enqueue<bool>(std::move(done), [id = std::move(id)](pg_connection& c, const callback<bool>& done) {
    auto u = c.run("DELETE FROM retry_tasks WHERE id = $1 AND status = 'DEAD_LETTERED'", {text(id)});
    if (c.failed) return failure<bool>(done, c.error);
    return answer<bool>(done, std::nullopt, u.changes() > 0);
  });
}

void postgres_store::submit_counts(callback<status_counts> done) {
  enqueue<status_counts>(std::move(done), [](pg_connection& c, const callback<status_counts>& done) {
    // Counted by the database on each call: a fleet moves tasks that this process never sees.
    auto r = c.run("SELECT status, count(*) FROM retry_tasks GROUP BY status", {});
    if (c.failed) return failure<status_counts>(done, c.error);
    status_counts counts{};
    for (int i = 0; i < r.rows(); ++i)
      if (auto st = parse_task_status(r.text(i, 0)))
        counts[static_cast<std::size_t>(*st)] = static_cast<std::uint64_t>(r.integer(i, 1));
    return answer<status_counts>(done, std::nullopt, counts);
  });
}

void postgres_store::submit_purge(wall_clock::time_point ended_before, std::size_t limit,
                                  callback<std::uint64_t> done) {
  enqueue<std::uint64_t>(std::move(done), [ended_before, limit](pg_connection& c,
                                                                const callback<std::uint64_t>& done) {
    // SKIP LOCKED: every instance of a fleet purges; they split the rows instead of waiting.
    // Attempts go with their task (ON DELETE CASCADE).
    auto u = c.run(
        "DELETE FROM retry_tasks WHERE id IN (SELECT id FROM retry_tasks WHERE status IN ('SUCCEEDED', 'CANCELLED', "
        "'EXHAUSTED') AND next_attempt_at < $1 ORDER BY next_attempt_at LIMIT $2 FOR UPDATE SKIP LOCKED)",
        {number(to_ms(ended_before)), number(static_cast<std::int64_t>(limit))});
    if (c.failed) return failure<std::uint64_t>(done, c.error);
    return answer<std::uint64_t>(done, std::nullopt, u.changes());
  });
}

void postgres_store::submit_put_policy(stored_policy p, callback<policy_put> done) {
  enqueue<policy_put>(std::move(done), [p = std::move(p)](pg_connection& c, const callback<policy_put>& done) {
    auto u = c.run(
        "INSERT INTO retry_policies (id, spec, created_at) VALUES ($1, $2, $3) ON CONFLICT (id) DO NOTHING",
        {text(p.id), text(p.spec), number(to_ms(p.created_at))});
    if (c.failed) return failure<policy_put>(done, c.error);
    if (u.changes() > 0) return answer<policy_put>(done, std::nullopt, policy_put::created);
    auto r = c.run("SELECT spec FROM retry_policies WHERE id = $1", {text(p.id)});
    if (c.failed || r.rows() == 0) return failure<policy_put>(done, c.failed ? c.error : "the policy vanished");
    return answer<policy_put>(done, std::nullopt, r.text(0, 0) == p.spec ? policy_put::unchanged : policy_put::conflict);
  });
}

void postgres_store::submit_get_policy(std::string id, callback<std::optional<stored_policy>> done) {
  enqueue<std::optional<stored_policy>>(
      std::move(done), [id = std::move(id)](pg_connection& c, const callback<std::optional<stored_policy>>& done) {
        auto r = c.run("SELECT spec, created_at FROM retry_policies WHERE id = $1", {text(id)});
        if (c.failed) return failure<std::optional<stored_policy>>(done, c.error);
        if (r.rows() == 0) return answer<std::optional<stored_policy>>(done, std::nullopt, std::nullopt);
        return answer<std::optional<stored_policy>>(done, std::nullopt,
                                                    stored_policy{id, r.text(0, 0), from_ms(r.integer(0, 1))});
      });
}

void postgres_store::submit_claim_key(std::string scope_key, std::string fingerprint, wall_clock::time_point now,
                                      wall_clock::time_point lease_until, callback<key_claim> done) {
  enqueue<key_claim>(std::move(done), [this, scope_key = std::move(scope_key), fingerprint = std::move(fingerprint), now,
                                       lease_until](pg_connection& c, const callback<key_claim>& done) {
    // Only a key that is new needs room; one held or answered is found whatever the size.
    // So the full check comes first only when the key is unknown (the insert below).
    if (guard_.full()) {
      auto r = c.run("SELECT 1 FROM idempotency_keys WHERE scope_key = $1", {text(scope_key)});
      if (c.failed) return failure<key_claim>(done, c.error);
      if (r.rows() == 0) {
        if (auto refused = refuse_new(c)) return answer<key_claim>(done, std::move(refused), key_claim{});
      }
    }
    // Never seen: the insert takes it. Two instances inserting at once: the second waits for
    // the first's commit and inserts nothing, then reads what the first holds.
    auto ins = c.run(
        "INSERT INTO idempotency_keys (scope_key, fingerprint, state, lease_expires, expires_at) "
        "VALUES ($1, $2, 'pending', $3, $3) ON CONFLICT (scope_key) DO NOTHING",
        {text(scope_key), text(fingerprint), number(to_ms(lease_until))});
    if (c.failed) return failure<key_claim>(done, c.error);
    if (ins.changes() > 0) return answer<key_claim>(done, std::nullopt, key_claim{});
    auto r = c.run(
        "SELECT fingerprint, state, lease_expires, expires_at, status, headers, body FROM idempotency_keys "
        "WHERE scope_key = $1 FOR UPDATE",
        {text(scope_key)});
    if (c.failed) return failure<key_claim>(done, c.error);
    if (r.rows() > 0) {
      bool const pending = r.text(0, 1) == "pending";
      // An expired answer, or a holder whose lease ran out (it crashed): the key is free again.
      bool const free = pending ? r.integer(0, 2) <= to_ms(now) : r.integer(0, 3) <= to_ms(now);
      if (!free) {
        if (r.text(0, 0) != fingerprint) return answer<key_claim>(done, std::nullopt, key_claim{key_state::mismatch, {}});
        if (pending) return answer<key_claim>(done, std::nullopt, key_claim{key_state::in_flight, {}});
        return answer<key_claim>(done, std::nullopt,
                                 key_claim{key_state::replay,
                                           pinned_response{static_cast<unsigned>(r.integer(0, 4)),
                                                           decode_headers(r.text(0, 5)), r.text(0, 6)}});
      }
    }
    c.run(
        "INSERT INTO idempotency_keys (scope_key, fingerprint, state, lease_expires, expires_at) "
        "VALUES ($1, $2, 'pending', $3, $3) ON CONFLICT (scope_key) DO UPDATE SET fingerprint = EXCLUDED.fingerprint, "
        "state = 'pending', lease_expires = EXCLUDED.lease_expires, expires_at = EXCLUDED.expires_at, status = 0, "
        "headers = '', body = ''",
        {text(scope_key), text(fingerprint), number(to_ms(lease_until))});
    if (c.failed) return failure<key_claim>(done, c.error);
    return answer<key_claim>(done, std::nullopt, key_claim{});
  });
}

void postgres_store::submit_complete_key(std::string scope_key, pinned_response r, wall_clock::time_point expires_at,
                                         callback<bool> done) {
  enqueue<bool>(std::move(done), [scope_key = std::move(scope_key), r = std::move(r), expires_at](
                                     pg_connection& c, const callback<bool>& done) {
    auto u = c.run(
        "UPDATE idempotency_keys SET state = 'complete', expires_at = $2, status = $3, headers = $4, body = $5 "
        "WHERE scope_key = $1 AND state = 'pending'",
        {text(scope_key), number(to_ms(expires_at)), number(r.status), bytes(encode_headers(r.headers)),
         bytes(r.body)});
    if (c.failed) return failure<bool>(done, c.error);
    return answer<bool>(done, std::nullopt, u.changes() > 0);
  });
}

void postgres_store::submit_release_key(std::string scope_key, callback<bool> done) {
  enqueue<bool>(std::move(done), [scope_key = std::move(scope_key)](pg_connection& c, const callback<bool>& done) {
    auto u = c.run("DELETE FROM idempotency_keys WHERE scope_key = $1 AND state = 'pending'", {text(scope_key)});
    if (c.failed) return failure<bool>(done, c.error);
    return answer<bool>(done, std::nullopt, u.changes() > 0);
  });
}

void postgres_store::submit_purge_keys(wall_clock::time_point now, std::size_t limit, callback<std::uint64_t> done) {
  enqueue<std::uint64_t>(std::move(done), [now, limit](pg_connection& c, const callback<std::uint64_t>& done) {
    auto u = c.run(
        "DELETE FROM idempotency_keys WHERE scope_key IN (SELECT scope_key FROM idempotency_keys WHERE expires_at <= "
        "$1 LIMIT $2 FOR UPDATE SKIP LOCKED)",
        {number(to_ms(now)), number(static_cast<std::int64_t>(limit))});
    if (c.failed) return failure<std::uint64_t>(done, c.error);
    return answer<std::uint64_t>(done, std::nullopt, u.changes());
  });
}

}  // namespace rebound::store
