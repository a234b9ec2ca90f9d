#include "proxy/store/sqlite_store.hpp"

#include <sqlite3.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <stdexcept>

namespace rebound::store {

std::string_view to_string(task_status s) {
  switch (s) {
    case task_status::pending: return "PENDING";
    case task_status::in_flight: return "IN_FLIGHT";
    case task_status::succeeded: return "SUCCEEDED";
    case task_status::exhausted: return "EXHAUSTED";
    case task_status::cancelled: return "CANCELLED";
    case task_status::dead_lettered: return "DEAD_LETTERED";
  }
  return "PENDING";
}

std::optional<task_status> parse_task_status(std::string_view s) {
  for (auto t : {task_status::pending, task_status::in_flight, task_status::succeeded, task_status::exhausted,
                 task_status::cancelled, task_status::dead_lettered})
    if (to_string(t) == s) return t;
  return std::nullopt;
}

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
};
static_assert(std::size(migrations) == sqlite_store::schema_version);

std::int64_t to_ms(wall_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}
wall_clock::time_point from_ms(std::int64_t ms) {
  return wall_clock::time_point(std::chrono::duration_cast<wall_clock::duration>(std::chrono::milliseconds(ms)));
}

std::string encode_headers(const std::vector<std::pair<std::string, std::string>>& headers) {
  std::string out;
  for (auto const& [name, value] : headers) {
    out += name;
    out += '\0';
    out += value;
    out += '\0';
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> decode_headers(std::string_view in) {
  std::vector<std::pair<std::string, std::string>> out;
  while (!in.empty()) {
    auto const n = in.find('\0');
    if (n == std::string_view::npos) break;
    auto const v = in.find('\0', n + 1);
    if (v == std::string_view::npos) break;
    out.emplace_back(std::string(in.substr(0, n)), std::string(in.substr(n + 1, v - n - 1)));
    in.remove_prefix(v + 1);
  }
  return out;
}

/// One prepared statement, finalized with its scope.
class statement {
 public:
  statement(sqlite3* db, const char* sql) : db_(db) {
    if (sqlite3_prepare_v2(db, sql, -1, &s_, nullptr) != SQLITE_OK) s_ = nullptr;
  }
  ~statement() { sqlite3_finalize(s_); }
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
  std::string text(int col) const {
    auto const* p = reinterpret_cast<const char*>(sqlite3_column_blob(s_, col));
    return p ? std::string(p, static_cast<std::size_t>(sqlite3_column_bytes(s_, col))) : std::string();
  }
  std::int64_t integer(int col) const { return sqlite3_column_int64(s_, col); }
  void reset() {
    sqlite3_reset(s_);
    sqlite3_clear_bindings(s_);
  }
  std::string error() const { return sqlite3_errmsg(db_); }

 private:
  sqlite3* db_;
  sqlite3_stmt* s_ = nullptr;
};

bool exec(sqlite3* db, const char* sql, std::string* error = nullptr) {
  char* msg = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &msg) == SQLITE_OK) return true;
  if (error) *error = msg ? msg : sqlite3_errmsg(db);
  sqlite3_free(msg);
  return false;
}

constexpr const char* task_columns =
    "id, idempotency_key, dependency, method, target, headers, body, policy_id, attempts, next_attempt_at, "
    "created_at, status, window_start, attempts_before";

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
  if (!exec(db, "PRAGMA locking_mode=EXCLUSIVE; PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; "
                "PRAGMA foreign_keys=ON;", &error))
    throw std::runtime_error("store.path " + path + ": not a usable SQLite database: " + error);
  statement v(db, "PRAGMA user_version");
  if (!v.ok() || v.step() != SQLITE_ROW) throw std::runtime_error("store.path " + path + ": cannot read the schema version");
  auto const version = static_cast<int>(v.integer(0));
  if (version > sqlite_store::schema_version)
    throw std::runtime_error("store.path " + path + ": schema version " + std::to_string(version) +
                             " is newer than this rebound understands (" + std::to_string(sqlite_store::schema_version) +
                             ")");
  for (int i = version; i < sqlite_store::schema_version; ++i) {
    std::string const sql = std::string("BEGIN IMMEDIATE;") + migrations[i] + "PRAGMA user_version=" +
                            std::to_string(i + 1) + ";COMMIT;";
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

}  // namespace

sqlite_store::sqlite_store(const std::string& path) {
  try {
    open_or_throw(path, db_);
  } catch (...) {
    sqlite3_close(db_);
    throw;
  }
  thread_ = std::thread([this] { run(); });
}

sqlite_store::~sqlite_store() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  thread_.join();
  sqlite3_close(db_);
}

void sqlite_store::enqueue(work w) {
  {
    std::lock_guard lock(mutex_);
    work_.push_back(std::move(w));
  }
  wake_.notify_one();
}

void sqlite_store::run() {
  for (;;) {
    std::vector<pending_accept> group;
    std::deque<work> jobs;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !accepts_.empty() || !work_.empty(); });
      if (accepts_.empty() && work_.empty()) return;  // stopping, and nothing left to do
      group.swap(accepts_);
      jobs.swap(work_);
    }
    // Everything accepted while the last commit was on its way goes in one transaction.
    if (!group.empty()) commit_accepts(group);
    for (auto& job : jobs) job(db_);
  }
}

void sqlite_store::commit_accepts(std::vector<pending_accept>& group) {
  std::string error;
  std::vector<std::optional<store_error>> outcome(group.size());
  if (!exec(db_, "BEGIN IMMEDIATE", &error)) {
    for (auto& a : group) a.done(store_error{"cannot begin a transaction: " + error}, false);
    return;
  }
  {
    statement insert(db_,
                     "INSERT INTO retry_tasks (id, idempotency_key, dependency, method, target, headers, body, "
                     "policy_id, attempts, next_attempt_at, created_at, status) "
                     "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)");
    for (std::size_t i = 0; i < group.size(); ++i) {
      auto const& t = group[i].task;
      if (!insert.ok()) {
        outcome[i] = store_error{insert.error()};
        continue;
      }
      insert.bind(1, t.id).bind(2, t.idempotency_key).bind(3, t.dependency).bind(4, t.method).bind(5, t.target);
      insert.bind_blob(6, encode_headers(t.headers)).bind_blob(7, t.body).bind(8, t.policy_id);
      insert.bind(9, static_cast<std::int64_t>(t.attempts)).bind(10, to_ms(t.next_attempt_at));
      insert.bind(11, to_ms(t.created_at)).bind(12, to_string(t.status));
      // One task refused (a duplicate id) fails alone; the statement, not the transaction, aborts.
      if (insert.step() != SQLITE_DONE) outcome[i] = store_error{insert.error()};
      insert.reset();
    }
  }
  if (!exec(db_, "COMMIT", &error)) {
    exec(db_, "ROLLBACK");
    for (auto& a : group) a.done(store_error{"commit failed: " + error}, false);
    return;
  }
  accept_commits_.fetch_add(1, std::memory_order_relaxed);
  for (std::size_t i = 0; i < group.size(); ++i) group[i].done(outcome[i], !outcome[i]);
}

void sqlite_store::submit_accept(retry_task task, callback<bool> done) {
  {
    std::lock_guard lock(mutex_);
    accepts_.push_back({std::move(task), std::move(done)});
  }
  wake_.notify_one();
}

void sqlite_store::submit_claim(std::string owner, wall_clock::time_point now, wall_clock::time_point lease_until,
                                std::size_t limit, callback<std::vector<retry_task>> done) {
  enqueue([owner = std::move(owner), now, lease_until, limit, done = std::move(done)](sqlite3* db) {
    std::string const sql = std::string("UPDATE retry_tasks SET status = 'IN_FLIGHT', lease_owner = ?1, lease_expires = ?2 "
                                        "WHERE id IN (SELECT id FROM retry_tasks WHERE "
                                        "(status = 'PENDING' AND next_attempt_at <= ?3) OR "
                                        "(status = 'IN_FLIGHT' AND lease_expires <= ?3) "
                                        "ORDER BY next_attempt_at LIMIT ?4) RETURNING ") +
                            task_columns;
    statement s(db, sql.c_str());
    if (!s.ok()) return done(store_error{s.error()}, {});
    s.bind(1, owner).bind(2, to_ms(lease_until)).bind(3, to_ms(now)).bind(4, static_cast<std::int64_t>(limit));
    std::vector<retry_task> out;
    int rc;
    while ((rc = s.step()) == SQLITE_ROW) out.push_back(read_task(s));
    if (rc != SQLITE_DONE) return done(store_error{s.error()}, {});
    for (auto& t : out) t.status = task_status::in_flight;
    done(std::nullopt, std::move(out));
  });
}

void sqlite_store::submit_finish_attempt(std::string owner, attempt_log attempt, task_status next,
                                         wall_clock::time_point next_attempt_at, callback<bool> done) {
  enqueue([owner = std::move(owner), attempt = std::move(attempt), next, next_attempt_at,
           done = std::move(done)](sqlite3* db) {
    std::string error;
    if (!exec(db, "BEGIN IMMEDIATE", &error)) return done(store_error{error}, false);
    statement update(db,
                     "UPDATE retry_tasks SET status = ?1, attempts = ?2, next_attempt_at = ?3, lease_owner = NULL, "
                     "lease_expires = NULL WHERE id = ?4 AND status = 'IN_FLIGHT' AND lease_owner = ?5");
    update.bind(1, to_string(next)).bind(2, static_cast<std::int64_t>(attempt.number));
    update.bind(3, to_ms(next_attempt_at)).bind(4, attempt.task_id).bind(5, owner);
    if (update.step() != SQLITE_DONE) {
      error = update.error();
      exec(db, "ROLLBACK");
      return done(store_error{error}, false);
    }
    if (sqlite3_changes(db) == 0) {  // the lease expired and another owner took the task
      exec(db, "ROLLBACK");
      return done(std::nullopt, false);
    }
    statement log(db,
                  "INSERT OR REPLACE INTO attempt_logs (task_id, number, at, status, error_type, duration_us) "
                  "VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
    log.bind(1, attempt.task_id).bind(2, static_cast<std::int64_t>(attempt.number)).bind(3, to_ms(attempt.at));
    log.bind(4, static_cast<std::int64_t>(attempt.status)).bind(5, attempt.error_type);
    log.bind(6, static_cast<std::int64_t>(attempt.duration.count()));
    if (log.step() != SQLITE_DONE || !exec(db, "COMMIT", &error)) {
      if (error.empty()) error = log.error();
      exec(db, "ROLLBACK");
      return done(store_error{error}, false);
    }
    done(std::nullopt, true);
  });
}

void sqlite_store::submit_postpone(std::string owner, std::string id, wall_clock::time_point until,
                                   callback<bool> done) {
  enqueue([owner = std::move(owner), id = std::move(id), until, done = std::move(done)](sqlite3* db) {
    statement s(db,
                "UPDATE retry_tasks SET status = 'PENDING', next_attempt_at = ?1, lease_owner = NULL, "
                "lease_expires = NULL WHERE id = ?2 AND status = 'IN_FLIGHT' AND lease_owner = ?3");
    s.bind(1, to_ms(until)).bind(2, id).bind(3, owner);
    if (s.step() != SQLITE_DONE) return done(store_error{s.error()}, false);
    done(std::nullopt, sqlite3_changes(db) > 0);
  });
}

void sqlite_store::submit_get(std::string id, callback<std::optional<retry_task>> done) {
  enqueue([id = std::move(id), done = std::move(done)](sqlite3* db) {
    std::string const sql = std::string("SELECT ") + task_columns + " FROM retry_tasks WHERE id = ?1";
    statement s(db, sql.c_str());
    s.bind(1, id);
    auto const rc = s.step();
    if (rc == SQLITE_ROW) return done(std::nullopt, read_task(s));
    if (rc == SQLITE_DONE) return done(std::nullopt, std::nullopt);
    done(store_error{s.error()}, std::nullopt);
  });
}

void sqlite_store::submit_attempts(std::string id, callback<std::vector<attempt_log>> done) {
  enqueue([id = std::move(id), done = std::move(done)](sqlite3* db) {
    statement s(db,
                "SELECT number, at, status, error_type, duration_us FROM attempt_logs WHERE task_id = ?1 "
                "ORDER BY number");
    s.bind(1, id);
    std::vector<attempt_log> out;
    int rc;
    while ((rc = s.step()) == SQLITE_ROW)
      out.push_back({id, static_cast<unsigned>(s.integer(0)), from_ms(s.integer(1)), static_cast<unsigned>(s.integer(2)),
                     s.text(3), std::chrono::microseconds(s.integer(4))});
    if (rc != SQLITE_DONE) return done(store_error{s.error()}, {});
    done(std::nullopt, std::move(out));
  });
}

void sqlite_store::submit_list(task_status status, std::string dependency, std::string after, std::size_t limit,
                               callback<std::vector<retry_task>> done) {
  enqueue([status, dependency = std::move(dependency), after = std::move(after), limit,
           done = std::move(done)](sqlite3* db) {
    std::string const sql = std::string("SELECT ") + task_columns +
                            " FROM retry_tasks WHERE status = ?1 AND (?2 = '' OR dependency = ?2) AND id > ?3 "
                            "ORDER BY id LIMIT ?4";
    statement s(db, sql.c_str());
    s.bind(1, to_string(status)).bind(2, dependency).bind(3, after).bind(4, static_cast<std::int64_t>(limit));
    std::vector<retry_task> out;
    int rc;
    while ((rc = s.step()) == SQLITE_ROW) out.push_back(read_task(s));
    if (rc != SQLITE_DONE) return done(store_error{s.error()}, {});
    done(std::nullopt, std::move(out));
  });
}

void sqlite_store::submit_replay(std::string id, wall_clock::time_point now, callback<bool> done) {
  enqueue([id = std::move(id), now, done = std::move(done)](sqlite3* db) {
    statement s(db,
                "UPDATE retry_tasks SET status = 'PENDING', next_attempt_at = ?1, window_start = ?1, "
                "attempts_before = attempts WHERE id = ?2 AND status = 'DEAD_LETTERED'");
    s.bind(1, to_ms(now)).bind(2, id);
    if (s.step() != SQLITE_DONE) return done(store_error{s.error()}, false);
    done(std::nullopt, sqlite3_changes(db) > 0);
  });
}

void sqlite_store::submit_cancel(std::string id, callback<bool> done) {
  enqueue([id = std::move(id), done = std::move(done)](sqlite3* db) {
    statement s(db, "UPDATE retry_tasks SET status = 'CANCELLED' WHERE id = ?1 AND status = 'PENDING'");
    s.bind(1, id);
    if (s.step() != SQLITE_DONE) return done(store_error{s.error()}, false);
    done(std::nullopt, sqlite3_changes(db) > 0);
  });
}

void sqlite_store::submit_count(task_status st, callback<std::uint64_t> done) {
  enqueue([st, done = std::move(done)](sqlite3* db) {
    statement s(db, "SELECT count(*) FROM retry_tasks WHERE status = ?1");
    s.bind(1, to_string(st));
    if (s.step() != SQLITE_ROW) return done(store_error{s.error()}, 0);
    done(std::nullopt, static_cast<std::uint64_t>(s.integer(0)));
  });
}

}  // namespace rebound::store
