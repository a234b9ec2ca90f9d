#include "proxy/store/sqlite_store.hpp"

#include "proxy/store/sqlite_database.hpp"
#include "proxy/store/statements.hpp"
#include "proxy/store/store_support.hpp"

#include <sqlite3.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <tuple>
#include <stdexcept>
#include <unordered_map>
#include <utility>

namespace rebound::store {

namespace {

/// Each entry moves the schema one version on; entry i takes user_version i to i + 1.
constexpr const char* migrations[] = {
    R"sql(
CREATE TABLE retry_tasks (
  id              TEXT PRIMARY KEY,
  idempotency_key TEXT NOT NULL,
  dependency      TEXT NOT NULL,
  method          TEXT NOT NULL,
  target          TEXT NOT NULL,
  headers         BLOB NOT NULL,  -- name NUL value NUL ...: HTTP field values hold no NUL
  body            BLOB NOT NULL,
  policy_id       TEXT NOT NULL,
  attempts        INTEGER NOT NULL,
  next_attempt_at INTEGER NOT NULL,  -- milliseconds since the Unix epoch
  created_at      INTEGER NOT NULL,
  status          TEXT NOT NULL,
  lease_owner     TEXT,
  lease_expires   INTEGER
);
CREATE INDEX retry_tasks_due ON retry_tasks (status, next_attempt_at);
CREATE INDEX retry_tasks_lease ON retry_tasks (status, lease_expires);
CREATE TABLE attempt_logs (
  task_id     TEXT NOT NULL REFERENCES retry_tasks (id),
  number      INTEGER NOT NULL,
  at          INTEGER NOT NULL,
  status      INTEGER NOT NULL,
  error_type  TEXT NOT NULL,
  duration_us INTEGER NOT NULL,
  PRIMARY KEY (task_id, number)
);
)sql",
    // 2: replay of dead letters (a fresh R-2/R-3 window) and the DLQ listing by id.
    R"sql(
ALTER TABLE retry_tasks ADD COLUMN window_start INTEGER NOT NULL DEFAULT 0;  -- 0: created_at
ALTER TABLE retry_tasks ADD COLUMN attempts_before INTEGER NOT NULL DEFAULT 0;
CREATE INDEX retry_tasks_status_id ON retry_tasks (status, id);
)sql",
    // 3: policies registered through the admin API, kept as the text they were registered with.
    R"sql(
CREATE TABLE retry_policies (
  id         TEXT PRIMARY KEY,
  spec       TEXT NOT NULL,
  created_at INTEGER NOT NULL
);
)sql",
    // 4: idempotency keys and event ids of the inbound side (R-6), with the answers they pin.
    R"sql(
CREATE TABLE idempotency_keys (
  scope_key     TEXT PRIMARY KEY,  -- route, principal hash, key
  fingerprint   TEXT NOT NULL,     -- SHA-256 of method, path and (canonical) body
  state         TEXT NOT NULL,     -- pending | complete
  lease_expires INTEGER NOT NULL,  -- pending: another request may take the key after this
  expires_at    INTEGER NOT NULL,  -- complete: kept until
  status        INTEGER NOT NULL DEFAULT 0,
  headers       BLOB NOT NULL DEFAULT x'',
  body          BLOB NOT NULL DEFAULT x''
);
CREATE INDEX idempotency_keys_expiry ON idempotency_keys (state, expires_at);
)sql",
};

/** The id this database is known by in the metrics (task_store::identity), made once. Not a
    migration: an older rebound opens the file as before (a rollback keeps working), and a
    newer one finds the id there. */
constexpr const char* made_once_id = R"sql(
BEGIN IMMEDIATE;
CREATE TABLE IF NOT EXISTS rebound_store (id TEXT NOT NULL);
INSERT INTO rebound_store SELECT lower(hex(randomblob(6))) WHERE NOT EXISTS (SELECT 1 FROM rebound_store);
COMMIT;
)sql";
static_assert(std::size(migrations) == sqlite_store::schema_version);

using detail::database;
using detail::exec;

/// Opens and migrates the file; the id it is known by (made_once_id).
std::string open_or_throw(const std::string& path, sqlite3*& db) {
  // Created 0600 before SQLite opens it: task bodies and headers are the app's calls,
  // credentials included (R-9), and must not be readable by anyone else.
  int const fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) throw std::runtime_error("store.path " + path + ": cannot open or create the file");
  ::close(fd);
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nullptr) != SQLITE_OK) {
    std::string const why = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    db = nullptr;
    throw std::runtime_error("store.path " + path + ": " + why);
  }
  sqlite3_busy_timeout(db, 2000);
  std::string error;
  // One process per file: the lock taken by the first write below is held until close, so a
  // second rebound on the same file is refused here. WAL with synchronous=FULL: a commit is on
  // disk (fsync'd) when it returns.
  if (!exec(db,
            "PRAGMA locking_mode=EXCLUSIVE; PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; "
            "PRAGMA foreign_keys=ON;",
            &error))
    throw std::runtime_error("store.path " + path + ": not a usable SQLite database: " + error);
  int version = -1;
  {
    sqlite3_stmt* v = nullptr;
    if (sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &v, nullptr) == SQLITE_OK && sqlite3_step(v) == SQLITE_ROW)
      version = sqlite3_column_int(v, 0);
    sqlite3_finalize(v);
  }
  if (version < 0) throw std::runtime_error("store.path " + path + ": cannot read the schema version");
  if (version > sqlite_store::schema_version)
    throw std::runtime_error("store.path " + path + ": schema version " + std::to_string(version) +
                             " is newer than this rebound understands (" +
                             std::to_string(sqlite_store::schema_version) + ")");
  for (int i = version; i < sqlite_store::schema_version; ++i) {
    std::string const sql =
        std::string("BEGIN IMMEDIATE;") + migrations[i] + "PRAGMA user_version=" + std::to_string(i + 1) + ";COMMIT;";
    if (!exec(db, sql.c_str(), &error)) {
      exec(db, "ROLLBACK");
      throw std::runtime_error("store.path " + path + ": migration to schema version " + std::to_string(i + 1) +
                               " failed: " + error);
    }
  }
  // Holding the file alone, every task still IN_FLIGHT was held by a process that died
  // mid-attempt: it is due again at once, its attempt count kept.
  if (!exec(db, "BEGIN IMMEDIATE; UPDATE retry_tasks SET lease_expires = 0 WHERE status = 'IN_FLIGHT'; COMMIT;",
            &error)) {
    exec(db, "ROLLBACK");
    throw std::runtime_error("store.path " + path + ": in use by another process, or not writable: " + error);
  }
  if (!exec(db, made_once_id, &error)) {
    exec(db, "ROLLBACK");
    throw std::runtime_error("store.path " + path + ": cannot record the store's id: " + error);
  }
  std::string id;
  sqlite3_stmt* s = nullptr;
  if (sqlite3_prepare_v2(db, "SELECT id FROM rebound_store", -1, &s, nullptr) == SQLITE_OK &&
      sqlite3_step(s) == SQLITE_ROW)
    if (auto const* text = sqlite3_column_text(s, 0)) id = reinterpret_cast<const char*>(text);
  sqlite3_finalize(s);
  if (id.empty()) throw std::runtime_error("store.path " + path + ": the store's id (table rebound_store) is missing");
  return id;
}

}  // namespace

sqlite_store::sqlite_store(const std::string& path,
                           std::function<void(std::chrono::nanoseconds, std::size_t)> on_commit,
                           std::uint64_t max_size)
    : sql_store(sql::dialect::sqlite),
      db_(std::make_unique<database>()),
      on_commit_(std::move(on_commit)),
      guard_(max_size) {
  identity_ = "sqlite/" + open_or_throw(path, db_->raw);  // on a throw, db_ closes what was opened
  if (max_size > 0) {
    // The write-ahead log is part of what the store holds (used_bytes counts it): checkpointed
    // once it reaches a quarter of store.max_size (SQLite's default is 1,000 pages, 4 MiB, which
    // alone would pass a small limit) and truncated back to that after each checkpoint.
    auto const pages = std::clamp<std::uint64_t>(max_size / 4 / 4096, 16, 1000);
    std::string error;
    std::string const pragmas = "PRAGMA wal_autocheckpoint=" + std::to_string(pages) +
                                "; PRAGMA journal_size_limit=" + std::to_string(pages * 4096) + ";";
    if (!exec(db_->raw, pragmas.c_str(), &error))
      throw std::runtime_error("store.path " + path + ": " + error);
    db_->wal_reserve = pages * 4096;
  }
  if (auto used = db_->used_bytes()) guard_.measured(*used);
  // Counted once here, then kept as calls move tasks (database::moved).
  status_counts counts{};
  auto s = db_->prepare(q().count_by_status);
  int rc;
  while ((rc = s.step()) == SQLITE_ROW)
    if (auto st = parse_task_status(s.text(0)))
      counts[static_cast<std::size_t>(*st)] = static_cast<std::uint64_t>(s.integer(1));
  if (rc != SQLITE_DONE) throw std::runtime_error("store.path " + path + ": cannot count the tasks: " + s.error());
  db_->set_counts(counts);
  thread_ = std::thread([this] { run(); });
}

sqlite_store::~sqlite_store() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

/** A call's view of the file. A savepoint per call that writes twice, so a call that fails
    halfway leaves nothing behind while the calls grouped with it still commit; an error is
    kept as it was said, before an undo's statements say anything else. */
class sqlite_store::session final : public sql::session {
 public:
  session(sqlite_store& store, database& db) : store_(store), db_(db) {}

  std::string error() const override { return error_; }
  void made_due() override { db_.made_due = true; }
  void moved(std::optional<task_status> from, std::optional<task_status> to, std::int64_t n) override {
    db_.moved(from, to, n);
  }
  std::optional<status_counts> kept_counts() const override { return db_.counts(); }
  bool begin_call() override {
    if (db_.run("SAVEPOINT call")) return true;
    error_ = db_.error();
    return false;
  }
  void end_call(bool keep) override {
    if (!keep) db_.run("ROLLBACK TO call");
    db_.run("RELEASE call");
  }
  bool full() override {
    if (auto used = db_.used_bytes()) store_.guard_.measured(*used);
    return store_.guard_.full().has_value();
  }
  std::optional<store_error> refuse_new() override { return store_.refuse_new(db_); }
  std::optional<store_error> write_failed(std::string message) override {
    return store_.write_failed(db_, std::move(message));
  }

 private:
  std::optional<sql::rows> run_values(const std::string& sql, std::span<const sql::value> params) override {
    auto s = db_.prepare(sql);
    int i = 1;
    for (auto const& v : params) {
      if (v.type == sql::value::kind::number)
        s.bind(i++, v.number);
      else if (v.type == sql::value::kind::bytes)
        s.bind_blob(i++, v.chars);
      else
        s.bind(i++, v.chars);
    }
    sql::rows out;
    int rc;
    while ((rc = s.step()) == SQLITE_ROW) out.add_row(row_of(s));
    if (rc != SQLITE_DONE) {
      error_ = s.error();
      return std::nullopt;
    }
    out.set_changes(static_cast<std::uint64_t>(db_.changes()));
    return out;
  }

  static std::vector<sql::rows::cell> row_of(const detail::statement& s) {
    std::vector<sql::rows::cell> row(static_cast<std::size_t>(s.columns()));
    for (int c = 0; c < s.columns(); ++c) {
      if (s.type(c) == SQLITE_INTEGER)
        row[static_cast<std::size_t>(c)] = s.integer(c);
      else if (s.type(c) != SQLITE_NULL)
        row[static_cast<std::size_t>(c)] = s.text(c);
    }
    return row;
  }

  sqlite_store& store_;
  database& db_;
  std::string error_;
};

void sqlite_store::enqueue(call c) {
  {
    std::lock_guard lock(mutex_);
    work_.push_back(std::move(c));
  }
  wake_.notify_one();
}

void sqlite_store::run() {
  std::vector<call> jobs;
  std::vector<support::reply> replies;
  session calls(*this, *db_);
  for (;;) {
    jobs.clear();
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !work_.empty(); });
      if (work_.empty()) return;  // stopping, and nothing left to do
      jobs.swap(work_);
    }
    // Everything that arrived while the last commit was on its way goes in one transaction.
    std::optional<store_error> failed;
    std::string error;
    if (sqlite3_exec(db_->raw, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) != SQLITE_OK)
      failed = store_error{"cannot begin a transaction: " + db_->error()};
    db_->refuse(failed.has_value());
    replies.clear();
    for (auto& job : jobs) replies.push_back(job.run(calls));
    db_->refuse(false);
    if (failed) db_->committed(false);
    if (!failed) {
      auto const started = std::chrono::steady_clock::now();
      if (sqlite3_exec(db_->raw, "COMMIT", nullptr, nullptr, nullptr) != SQLITE_OK) {
        failed = store_error{"commit failed: " + db_->error()};
        if (db_->disk_full()) {
          guard_.disk_full(true);
          failed = guard_.refusal(failed->message);
        }
        sqlite3_exec(db_->raw, "ROLLBACK", nullptr, nullptr, nullptr);
        db_->committed(false);
      } else {
        db_->committed(true);
        // What ended or was purged gives room back: measured after every commit, so the
        // store takes new work again (and /readyz says so) without waiting for a new task.
        if (auto used = db_->used_bytes()) guard_.measured(*used);
        guard_.disk_full(false);
        commits_.fetch_add(1, std::memory_order_relaxed);
        if (on_commit_) on_commit_(std::chrono::steady_clock::now() - started, jobs.size());
      }
    }
    // What it accepted is started now, not at the scheduler's next poll (told before the
    // callers, so a task is never answered before its scheduler knows of it).
    if (!failed && std::exchange(db_->made_due, false)) tasks_due(due_from::local);
    db_->made_due = false;
    for (auto& r : replies) r(failed);
  }
}

std::optional<store_error> sqlite_store::refuse_new(database& db) {
  if (auto used = db.used_bytes()) guard_.measured(*used);
  return guard_.refuse_new();
}

std::optional<store_error> sqlite_store::write_failed(database& db, std::string message) {
  if (!db.disk_full()) return store_error{std::move(message)};
  guard_.disk_full(true);
  return guard_.refusal(std::move(message));
}

}  // namespace rebound::store
