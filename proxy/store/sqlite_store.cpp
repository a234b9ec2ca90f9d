#include "proxy/store/sqlite_store.hpp"

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

namespace rebound::store {

using support::decode_headers;
using support::encode_headers;
using support::from_ms;
using support::task_columns;
using support::to_ms;

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
static_assert(std::size(migrations) == sqlite_store::schema_version);

/// A prepared statement borrowed from the database's cache, reset for the next use when it ends.
class statement {
 public:
  statement(sqlite3* db, sqlite3_stmt* s) : db_(db), s_(s) {}
  ~statement() {
    if (!s_) return;
    sqlite3_reset(s_);
    sqlite3_clear_bindings(s_);
  }
  statement(const statement&) = delete;
  statement& operator=(const statement&) = delete;

  bool ok() const { return s_ != nullptr; }
  statement& bind(int i, std::string_view v) {
    sqlite3_bind_text(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  statement& bind_blob(int i, std::string_view v) {
    sqlite3_bind_blob(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  statement& bind(int i, std::int64_t v) {
    sqlite3_bind_int64(s_, i, v);
    return *this;
  }
  /// SQLITE_ROW, SQLITE_DONE, or an error code.
  int step() { return s_ ? sqlite3_step(s_) : SQLITE_ERROR; }
  /// step() until the statement is done: true when it ran to its end.
  bool run() { return step() == SQLITE_DONE; }
  std::string text(int col) const {
    auto const* p = reinterpret_cast<const char*>(sqlite3_column_blob(s_, col));
    return p ? std::string(p, static_cast<std::size_t>(sqlite3_column_bytes(s_, col))) : std::string();
  }
  std::int64_t integer(int col) const { return sqlite3_column_int64(s_, col); }
  std::string error() const { return sqlite3_errmsg(db_); }

 private:
  sqlite3* db_;
  sqlite3_stmt* s_;
};

bool exec(sqlite3* db, const char* sql, std::string* error = nullptr) {
  char* msg = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &msg) == SQLITE_OK) return true;
  if (error) *error = msg ? msg : sqlite3_errmsg(db);
  sqlite3_free(msg);
  return false;
}

retry_task read_task(const statement& s) {
  retry_task t;
  t.id = s.text(0);
  t.idempotency_key = s.text(1);
  t.dependency = s.text(2);
  t.method = s.text(3);
  t.target = s.text(4);
  t.headers = decode_headers(s.text(5));
  t.body = s.text(6);
  t.policy_id = s.text(7);
  t.attempts = static_cast<unsigned>(s.integer(8));
  t.next_attempt_at = from_ms(s.integer(9));
  t.created_at = from_ms(s.integer(10));
  t.status = parse_task_status(s.text(11)).value_or(task_status::pending);
  auto const window = s.integer(12);
  t.window_start = window > 0 ? from_ms(window) : t.created_at;
  t.attempts_before = static_cast<unsigned>(s.integer(13));
  return t;
}

}  // namespace

namespace detail {

/** The open file and its prepared statements, used by the store's thread alone. Statements
    are prepared once: preparing costs as much as running the small ones, many times a
    second under load. */
class database {
 public:
  sqlite3* raw = nullptr;

  ~database() {
    for (auto& [sql, s] : cache_) sqlite3_finalize(s);
    sqlite3_close(raw);
  }

  /// A statement that fails at once while `refusing()`: what runs then must not autocommit.
  statement prepare(const std::string& sql) {
    if (refusing_) return statement(raw, nullptr);
    auto it = cache_.find(sql);
    if (it == cache_.end()) {
      sqlite3_stmt* s = nullptr;
      if (sqlite3_prepare_v3(raw, sql.c_str(), -1, SQLITE_PREPARE_PERSISTENT, &s, nullptr) != SQLITE_OK)
        return statement(raw, nullptr);
      it = cache_.emplace(sql, s).first;
    }
    return statement(raw, it->second);
  }
  bool run(const std::string& sql) { return prepare(sql).run(); }
  int changes() const { return sqlite3_changes(raw); }
  /// Whether the last failure was SQLite's "database or disk is full".
  bool disk_full() const { return (sqlite3_extended_errcode(raw) & 0xff) == SQLITE_FULL; }

  /** The bytes the database's pages in use take, this transaction's included: three reads
      of the file's header, cheap enough for every new task. Nothing when it cannot be read. */
  std::optional<std::uint64_t> used_bytes() {
    auto value = [this](const char* sql) -> std::optional<std::int64_t> {
      auto s = prepare(sql);
      if (s.step() != SQLITE_ROW) return std::nullopt;
      return s.integer(0);
    };
    auto const pages = value("PRAGMA page_count");
    auto const free = value("PRAGMA freelist_count");
    auto const size = value("PRAGMA page_size");
    if (!pages || !free || !size || *pages < *free) return std::nullopt;
    return static_cast<std::uint64_t>(*pages - *free) * static_cast<std::uint64_t>(*size);
  }
  std::string error() const { return sqlite3_errmsg(raw); }

  /// While set, every statement fails: a transaction could not begin.
  void refuse(bool on) { refusing_ = on; }

  /** Tasks by status, kept as calls move them so that reading them costs nothing: counting
      a backlog of millions would hold the store's one thread for a good part of a second.
      A call notes what it moved once its statements succeeded; the notes count once the
      transaction commits, and are dropped when it does not. */
  void moved(std::optional<task_status> from, std::optional<task_status> to, std::int64_t n = 1) {
    if (from) delta_[static_cast<std::size_t>(*from)] -= n;
    if (to) delta_[static_cast<std::size_t>(*to)] += n;
  }
  void committed(bool ok) {
    for (std::size_t i = 0; i < delta_.size(); ++i) {
      if (ok) counts_[i] = static_cast<std::uint64_t>(static_cast<std::int64_t>(counts_[i]) + delta_[i]);
      delta_[i] = 0;
    }
  }
  const status_counts& counts() const { return counts_; }
  void set_counts(const status_counts& c) { counts_ = c; }

 private:
  status_counts counts_{};
  std::array<std::int64_t, std::tuple_size_v<status_counts>> delta_{};
  std::unordered_map<std::string, sqlite3_stmt*> cache_;
  bool refusing_ = false;
};

}  // namespace detail

namespace {

using detail::database;

void open_or_throw(const std::string& path, sqlite3*& db) {
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
}

template <class T>
using callback = task_store::callback<T>;
using support::answer;
using support::failure;

/// Rows of `s` read with `read` until it is done; false on an error.
template <class T, class Read>
bool read_rows(statement& s, std::vector<T>& out, Read read) {
  int rc;
  while ((rc = s.step()) == SQLITE_ROW) out.push_back(read(s));
  return rc == SQLITE_DONE;
}

/// A savepoint around one call's statements, so a call that fails halfway leaves nothing
/// behind while the calls grouped with it still commit.
class savepoint {
 public:
  explicit savepoint(database& db) : db_(db) { ok_ = db_.run("SAVEPOINT call"); }
  ~savepoint() {
    if (!ok_) return;
    if (!released_) db_.run("ROLLBACK TO call");
    db_.run("RELEASE call");
  }
  savepoint(const savepoint&) = delete;
  savepoint& operator=(const savepoint&) = delete;
  bool ok() const { return ok_; }
  void keep() { released_ = true; }

 private:
  database& db_;
  bool ok_ = false;
  bool released_ = false;
};

const std::string select_task = std::string("SELECT ") + task_columns + " FROM retry_tasks ";

/// The WHERE of a task_filter over retry_tasks, bound from parameter 1 on.
constexpr const char* filter_where =
    "WHERE status = ?1 AND (?2 = '' OR dependency = ?2) AND (?3 < 0 OR next_attempt_at >= ?3) "
    "AND (?4 < 0 OR next_attempt_at < ?4) AND id > ?5 ORDER BY id LIMIT ?6";

void bind_filter(statement& s, const task_filter& f, task_status status) {
  s.bind(1, to_string(status)).bind(2, f.dependency);
  s.bind(3, f.since ? to_ms(*f.since) : std::int64_t{-1}).bind(4, f.until ? to_ms(*f.until) : std::int64_t{-1});
  s.bind(5, f.after).bind(6, static_cast<std::int64_t>(f.limit));
}

}  // namespace

sqlite_store::sqlite_store(const std::string& path,
                           std::function<void(std::chrono::nanoseconds, std::size_t)> on_commit,
                           std::uint64_t max_size)
    : db_(std::make_unique<database>()), on_commit_(std::move(on_commit)), guard_(max_size) {
  open_or_throw(path, db_->raw);  // on a throw, db_ closes what was opened
  if (auto used = db_->used_bytes()) guard_.measured(*used);
  // Counted once here, then kept as calls move tasks (database::moved).
  status_counts counts{};
  auto s = db_->prepare("SELECT status, count(*) FROM retry_tasks GROUP BY status");
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

void sqlite_store::enqueue(work w) {
  {
    std::lock_guard lock(mutex_);
    work_.push_back(std::move(w));
  }
  wake_.notify_one();
}

void sqlite_store::run() {
  std::vector<work> jobs;
  std::vector<reply> replies;
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
    for (auto& job : jobs) replies.push_back(job(*db_));
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

void sqlite_store::submit_accept(retry_task task, callback<bool> done) {
  enqueue([this, task = std::move(task), done = std::move(done)](database& db) {
    if (auto full = refuse_new(db)) return answer<bool>(done, std::move(full), false);
    auto insert = db.prepare(
        "INSERT INTO retry_tasks (id, idempotency_key, dependency, method, target, headers, body, policy_id, "
        "attempts, next_attempt_at, created_at, status) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)");
    insert.bind(1, task.id).bind(2, task.idempotency_key).bind(3, task.dependency).bind(4, task.method);
    insert.bind(5, task.target).bind_blob(6, encode_headers(task.headers)).bind_blob(7, task.body);
    insert.bind(8, task.policy_id).bind(9, static_cast<std::int64_t>(task.attempts));
    insert.bind(10, to_ms(task.next_attempt_at)).bind(11, to_ms(task.created_at)).bind(12, to_string(task.status));
    // One task refused (a duplicate id) fails alone: the statement, not the transaction, aborts.
    if (!insert.run()) return answer<bool>(done, write_failed(db, insert.error()), false);
    db.moved(std::nullopt, task.status);
    return answer<bool>(done, std::nullopt, true);
  });
}

void sqlite_store::submit_claim(std::string owner, wall_clock::time_point now, wall_clock::time_point lease_until,
                                std::size_t limit, callback<std::vector<retry_task>> done) {
  enqueue([owner = std::move(owner), now, lease_until, limit, done = std::move(done)](database& db) {
    // Two statements, each walking its own index in order: one OR'd query would sort every
    // due task to find the first few, which with a backlog of millions is the whole table.
    static const std::string expired =
        std::string(
            "UPDATE retry_tasks SET lease_owner = ?1, lease_expires = ?2 WHERE id IN (SELECT id FROM "
            "retry_tasks WHERE status = 'IN_FLIGHT' AND lease_expires <= ?3 LIMIT ?4) RETURNING ") +
        task_columns;
    static const std::string due =
        std::string(
            "UPDATE retry_tasks SET status = 'IN_FLIGHT', lease_owner = ?1, lease_expires = ?2 WHERE id IN "
            "(SELECT id FROM retry_tasks WHERE status = 'PENDING' AND next_attempt_at <= ?3 "
            "ORDER BY next_attempt_at LIMIT ?4) RETURNING ") +
        task_columns;
    std::vector<retry_task> out;
    for (auto const* sql : {&expired, &due}) {
      if (out.size() >= limit) break;
      auto s = db.prepare(*sql);
      s.bind(1, owner).bind(2, to_ms(lease_until)).bind(3, to_ms(now));
      s.bind(4, static_cast<std::int64_t>(limit - out.size()));
      auto const before = out.size();
      if (!read_rows(s, out, read_task)) return failure<std::vector<retry_task>>(done, s.error());
      if (sql == &due)
        db.moved(task_status::pending, task_status::in_flight, static_cast<std::int64_t>(out.size() - before));
    }
    for (auto& t : out) t.status = task_status::in_flight;
    return answer<std::vector<retry_task>>(done, std::nullopt, std::move(out));
  });
}

void sqlite_store::submit_finish_attempt(std::string owner, attempt_log attempt, task_status next,
                                         wall_clock::time_point next_attempt_at, callback<bool> done) {
  enqueue([owner = std::move(owner), attempt = std::move(attempt), next, next_attempt_at,
           done = std::move(done)](database& db) {
    savepoint sp(db);
    if (!sp.ok()) return failure<bool>(done, db.error());
    auto update = db.prepare(
        "UPDATE retry_tasks SET status = ?1, attempts = ?2, next_attempt_at = ?3, lease_owner = NULL, "
        "lease_expires = NULL WHERE id = ?4 AND status = 'IN_FLIGHT' AND lease_owner = ?5");
    update.bind(1, to_string(next)).bind(2, static_cast<std::int64_t>(attempt.number));
    update.bind(3, to_ms(next_attempt_at)).bind(4, attempt.task_id).bind(5, owner);
    if (!update.run()) return failure<bool>(done, update.error());
    if (db.changes() == 0) return answer<bool>(done, std::nullopt, false);  // the lease was lost
    auto log = db.prepare(
        "INSERT OR REPLACE INTO attempt_logs (task_id, number, at, status, error_type, duration_us) "
        "VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
    log.bind(1, attempt.task_id).bind(2, static_cast<std::int64_t>(attempt.number)).bind(3, to_ms(attempt.at));
    log.bind(4, static_cast<std::int64_t>(attempt.status)).bind(5, attempt.error_type);
    log.bind(6, static_cast<std::int64_t>(attempt.duration.count()));
    if (!log.run()) return failure<bool>(done, log.error());
    sp.keep();
    db.moved(task_status::in_flight, next);
    return answer<bool>(done, std::nullopt, true);
  });
}

void sqlite_store::submit_postpone(std::string owner, std::string id, wall_clock::time_point until,
                                   callback<bool> done) {
  enqueue([owner = std::move(owner), id = std::move(id), until, done = std::move(done)](database& db) {
    auto s = db.prepare(
        "UPDATE retry_tasks SET status = 'PENDING', next_attempt_at = ?1, lease_owner = NULL, lease_expires = NULL "
        "WHERE id = ?2 AND status = 'IN_FLIGHT' AND lease_owner = ?3");
    s.bind(1, to_ms(until)).bind(2, id).bind(3, owner);
    if (!s.run()) return failure<bool>(done, s.error());
    if (db.changes() == 0) return answer<bool>(done, std::nullopt, false);
    db.moved(task_status::in_flight, task_status::pending);
    return answer<bool>(done, std::nullopt, true);
  });
}

void sqlite_store::submit_get(std::string id, callback<std::optional<retry_task>> done) {
  enqueue([id = std::move(id), done = std::move(done)](database& db) {
    auto s = db.prepare(select_task + "WHERE id = ?1");
    s.bind(1, id);
    auto const rc = s.step();
    if (rc == SQLITE_ROW) return answer<std::optional<retry_task>>(done, std::nullopt, read_task(s));
    if (rc == SQLITE_DONE) return answer<std::optional<retry_task>>(done, std::nullopt, std::nullopt);
    return failure<std::optional<retry_task>>(done, s.error());
  });
}

void sqlite_store::submit_attempts(std::string id, unsigned after, std::size_t limit,
                                   callback<std::vector<attempt_log>> done) {
  enqueue([id = std::move(id), after, limit, done = std::move(done)](database& db) {
    auto s = db.prepare(
        "SELECT number, at, status, error_type, duration_us FROM attempt_logs WHERE task_id = ?1 AND number > ?2 "
        "ORDER BY number LIMIT ?3");
    s.bind(1, id).bind(2, static_cast<std::int64_t>(after)).bind(3, static_cast<std::int64_t>(limit));
    std::vector<attempt_log> out;
    bool const ok = read_rows(s, out, [&id](const statement& r) {
      return attempt_log{
          id,        static_cast<unsigned>(r.integer(0)),    from_ms(r.integer(1)), static_cast<unsigned>(r.integer(2)),
          r.text(3), std::chrono::microseconds(r.integer(4))};
    });
    if (!ok) return failure<std::vector<attempt_log>>(done, s.error());
    return answer<std::vector<attempt_log>>(done, std::nullopt, std::move(out));
  });
}

void sqlite_store::submit_list(task_filter filter, callback<std::vector<retry_task>> done) {
  enqueue([filter = std::move(filter), done = std::move(done)](database& db) {
    auto s = db.prepare(select_task + filter_where);
    bind_filter(s, filter, filter.status);
    std::vector<retry_task> out;
    if (!read_rows(s, out, read_task)) return failure<std::vector<retry_task>>(done, s.error());
    return answer<std::vector<retry_task>>(done, std::nullopt, std::move(out));
  });
}

namespace {
constexpr const char* replay_set =
    "UPDATE retry_tasks SET status = 'PENDING', next_attempt_at = ?7, window_start = ?7, attempts_before = attempts ";
}

void sqlite_store::submit_replay(std::string id, wall_clock::time_point now, callback<bool> done) {
  enqueue([id = std::move(id), now, done = std::move(done)](database& db) {
    auto s = db.prepare(std::string(replay_set) + "WHERE id = ?1 AND status = 'DEAD_LETTERED'");
    s.bind(1, id).bind(7, to_ms(now));
    if (!s.run()) return failure<bool>(done, s.error());
    if (db.changes() == 0) return answer<bool>(done, std::nullopt, false);
    db.moved(task_status::dead_lettered, task_status::pending);
    return answer<bool>(done, std::nullopt, true);
  });
}

void sqlite_store::submit_replay_matching(task_filter filter, wall_clock::time_point now,
                                          callback<std::vector<std::string>> done) {
  enqueue([filter = std::move(filter), now, done = std::move(done)](database& db) {
    auto s = db.prepare(std::string(replay_set) + "WHERE id IN (SELECT id FROM retry_tasks " + filter_where +
                        ") RETURNING id");
    bind_filter(s, filter, task_status::dead_lettered);
    s.bind(7, to_ms(now));
    std::vector<std::string> ids;
    if (!read_rows(s, ids, [](const statement& r) { return r.text(0); }))
      return failure<std::vector<std::string>>(done, s.error());
    db.moved(task_status::dead_lettered, task_status::pending, static_cast<std::int64_t>(ids.size()));
    std::sort(ids.begin(), ids.end());  // RETURNING keeps no order; the cursor is the last id
    return answer<std::vector<std::string>>(done, std::nullopt, std::move(ids));
  });
}

void sqlite_store::submit_cancel(std::string id, wall_clock::time_point now, callback<bool> done) {
  enqueue([id = std::move(id), now, done = std::move(done)](database& db) {
    // next_attempt_at becomes when it ended, as for every finished task (submit_purge).
    auto s = db.prepare(
        "UPDATE retry_tasks SET status = 'CANCELLED', next_attempt_at = ?2 WHERE id = ?1 AND status = 'PENDING'");
    s.bind(1, id).bind(2, to_ms(now));
    if (!s.run()) return failure<bool>(done, s.error());
    if (db.changes() == 0) return answer<bool>(done, std::nullopt, false);
    db.moved(task_status::pending, task_status::cancelled);
    return answer<bool>(done, std::nullopt, true);
  });
}

void sqlite_store::submit_delete_dead_letter(std::string id, callback<bool> done) {
  enqueue([id = std::move(id), done = std::move(done)](database& db) {
    savepoint sp(db);
    if (!sp.ok()) return failure<bool>(done, db.error());
    auto task = db.prepare("DELETE FROM retry_tasks WHERE id = ?1 AND status = 'DEAD_LETTERED'");
    auto logs = db.prepare("DELETE FROM attempt_logs WHERE task_id = ?1");
    logs.bind(1, id);
    task.bind(1, id);
    // Its attempts first: they refer to the task.
    if (!logs.run()) return failure<bool>(done, logs.error());
    if (!task.run()) return failure<bool>(done, task.error());
    if (db.changes() == 0) return answer<bool>(done, std::nullopt, false);  // the logs come back with the rollback
    sp.keep();
    db.moved(task_status::dead_lettered, std::nullopt);
    return answer<bool>(done, std::nullopt, true);
  });
}

void sqlite_store::submit_counts(callback<status_counts> done) {
  enqueue([done = std::move(done)](database& db) {
    return answer<status_counts>(done, std::nullopt, db.counts());  // as of the last commit
  });
}

void sqlite_store::submit_purge(wall_clock::time_point ended_before, std::size_t limit, callback<std::uint64_t> done) {
  enqueue([ended_before, limit, done = std::move(done)](database& db) {
    savepoint sp(db);
    if (!sp.ok()) return failure<std::uint64_t>(done, db.error());
    // A finished task's next_attempt_at is when it ended. Its attempts go first: they refer to it.
    constexpr const char* some =
        "(SELECT id FROM retry_tasks WHERE status = ?1 AND next_attempt_at < ?2 "
        "ORDER BY next_attempt_at LIMIT ?3)";
    std::uint64_t purged = 0;
    for (auto st : {task_status::succeeded, task_status::cancelled, task_status::exhausted}) {
      if (purged >= limit) break;
      auto logs = db.prepare(std::string("DELETE FROM attempt_logs WHERE task_id IN ") + some);
      auto tasks = db.prepare(std::string("DELETE FROM retry_tasks WHERE id IN ") + some);
      for (auto* s : {&logs, &tasks}) {
        s->bind(1, to_string(st)).bind(2, to_ms(ended_before)).bind(3, static_cast<std::int64_t>(limit - purged));
        if (!s->run()) return failure<std::uint64_t>(done, s->error());
      }
      auto const n = static_cast<std::uint64_t>(db.changes());
      db.moved(st, std::nullopt, static_cast<std::int64_t>(n));
      purged += n;
    }
    sp.keep();
    return answer<std::uint64_t>(done, std::nullopt, purged);
  });
}

void sqlite_store::submit_put_policy(stored_policy p, callback<policy_put> done) {
  enqueue([p = std::move(p), done = std::move(done)](database& db) {
    auto insert =
        db.prepare("INSERT INTO retry_policies (id, spec, created_at) VALUES (?1, ?2, ?3) ON CONFLICT (id) DO NOTHING");
    insert.bind(1, p.id).bind(2, p.spec).bind(3, to_ms(p.created_at));
    if (!insert.run()) return failure<policy_put>(done, insert.error());
    if (db.changes() > 0) return answer<policy_put>(done, std::nullopt, policy_put::created);
    auto existing = db.prepare("SELECT spec FROM retry_policies WHERE id = ?1");
    existing.bind(1, p.id);
    if (existing.step() != SQLITE_ROW) return failure<policy_put>(done, existing.error());
    return answer<policy_put>(done, std::nullopt,
                              existing.text(0) == p.spec ? policy_put::unchanged : policy_put::conflict);
  });
}

void sqlite_store::submit_get_policy(std::string id, callback<std::optional<stored_policy>> done) {
  enqueue([id = std::move(id), done = std::move(done)](database& db) {
    auto s = db.prepare("SELECT spec, created_at FROM retry_policies WHERE id = ?1");
    s.bind(1, id);
    auto const rc = s.step();
    if (rc == SQLITE_ROW)
      return answer<std::optional<stored_policy>>(done, std::nullopt,
                                                  stored_policy{id, s.text(0), from_ms(s.integer(1))});
    if (rc == SQLITE_DONE) return answer<std::optional<stored_policy>>(done, std::nullopt, std::nullopt);
    return failure<std::optional<stored_policy>>(done, s.error());
  });
}

void sqlite_store::submit_claim_key(std::string scope_key, std::string fingerprint, wall_clock::time_point now,
                                    wall_clock::time_point lease_until, callback<key_claim> done) {
  enqueue([this, scope_key = std::move(scope_key), fingerprint = std::move(fingerprint), now, lease_until,
           done = std::move(done)](database& db) {
    auto s = db.prepare(
        "SELECT fingerprint, state, lease_expires, expires_at, status, headers, body FROM idempotency_keys "
        "WHERE scope_key = ?1");
    s.bind(1, scope_key);
    auto const rc = s.step();
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) return failure<key_claim>(done, s.error());
    key_claim found;
    bool free = rc == SQLITE_DONE;
    if (!free) {
      bool const pending = s.text(1) == "pending";
      // An expired answer, or a holder whose lease ran out (it crashed): the key is free again.
      free = pending ? s.integer(2) <= to_ms(now) : s.integer(3) <= to_ms(now);
      if (!free) {
        if (s.text(0) != fingerprint)
          found.state = key_state::mismatch;
        else if (pending)
          found.state = key_state::in_flight;
        else
          found = key_claim{key_state::replay,
                            pinned_response{static_cast<unsigned>(s.integer(4)), decode_headers(s.text(5)), s.text(6)}};
      }
    }
    if (!free) return answer<key_claim>(done, std::nullopt, std::move(found));
    // A key already held or answered is found above even when the store is full: only a
    // new claim needs room.
    if (auto full = refuse_new(db)) return answer<key_claim>(done, std::move(full), key_claim{});
    auto claim = db.prepare(
        "INSERT OR REPLACE INTO idempotency_keys (scope_key, fingerprint, state, lease_expires, expires_at) "
        "VALUES (?1, ?2, 'pending', ?3, ?3)");
    claim.bind(1, scope_key).bind(2, fingerprint).bind(3, to_ms(lease_until));
    if (!claim.run()) return answer<key_claim>(done, write_failed(db, claim.error()), key_claim{});
    return answer<key_claim>(done, std::nullopt, key_claim{});
  });
}

void sqlite_store::submit_complete_key(std::string scope_key, pinned_response r, wall_clock::time_point expires_at,
                                       callback<bool> done) {
  enqueue([scope_key = std::move(scope_key), r = std::move(r), expires_at, done = std::move(done)](database& db) {
    auto s = db.prepare(
        "UPDATE idempotency_keys SET state = 'complete', expires_at = ?2, status = ?3, headers = ?4, body = ?5 "
        "WHERE scope_key = ?1 AND state = 'pending'");
    s.bind(1, scope_key).bind(2, to_ms(expires_at)).bind(3, static_cast<std::int64_t>(r.status));
    s.bind_blob(4, encode_headers(r.headers)).bind_blob(5, r.body);
    if (!s.run()) return failure<bool>(done, s.error());
    return answer<bool>(done, std::nullopt, db.changes() > 0);
  });
}

void sqlite_store::submit_release_key(std::string scope_key, callback<bool> done) {
  enqueue([scope_key = std::move(scope_key), done = std::move(done)](database& db) {
    auto s = db.prepare("DELETE FROM idempotency_keys WHERE scope_key = ?1 AND state = 'pending'");
    s.bind(1, scope_key);
    if (!s.run()) return failure<bool>(done, s.error());
    return answer<bool>(done, std::nullopt, db.changes() > 0);
  });
}

void sqlite_store::submit_purge_keys(wall_clock::time_point now, std::size_t limit, callback<std::uint64_t> done) {
  enqueue([now, limit, done = std::move(done)](database& db) {
    auto s = db.prepare(
        "DELETE FROM idempotency_keys WHERE scope_key IN (SELECT scope_key FROM idempotency_keys WHERE state IN "
        "('complete', 'pending') AND expires_at <= ?1 LIMIT ?2)");
    s.bind(1, to_ms(now)).bind(2, static_cast<std::int64_t>(limit));
    if (!s.run()) return failure<std::uint64_t>(done, s.error());
    return answer<std::uint64_t>(done, std::nullopt, static_cast<std::uint64_t>(db.changes()));
  });
}

}  // namespace rebound::store
