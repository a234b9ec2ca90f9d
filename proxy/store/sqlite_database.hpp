#pragma once
/** The SQLite file as the embedded store's one thread uses it: statements prepared once and
    borrowed from a cache, and the counts by status kept as calls move tasks. Included by
    sqlite_store.cpp alone. */
#include "proxy/store/task_store.hpp"

#include <sqlite3.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace rebound::store::detail {

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
  int columns() const { return sqlite3_column_count(s_); }
  /// SQLITE_INTEGER, SQLITE_TEXT, SQLITE_BLOB, SQLITE_NULL (SQLITE_FLOAT: no column holds one).
  int type(int col) const { return sqlite3_column_type(s_, col); }
  std::string error() const { return sqlite3_errmsg(db_); }

 private:
  sqlite3* db_;
  sqlite3_stmt* s_;
};

inline bool exec(sqlite3* db, const char* sql, std::string* error = nullptr) {
  char* msg = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &msg) == SQLITE_OK) return true;
  if (error) *error = msg ? msg : sqlite3_errmsg(db);
  sqlite3_free(msg);
  return false;
}

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

  /** The bytes the database's pages in use take, this transaction's included, and its
      write-ahead log's allowance (`wal_reserve`: the log is checkpointed at that size and
      truncated back to it, passing it only by the last group commit until the next
      checkpoint, so its file's size would make the measure dip at every checkpoint): three
      reads of the file's header, cheap enough for every new task. Nothing when it cannot be
      read. */
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
    return static_cast<std::uint64_t>(*pages - *free) * static_cast<std::uint64_t>(*size) + wal_reserve;
  }
  std::string error() const { return sqlite3_errmsg(raw); }

  std::uint64_t wal_reserve = 0;  ///< the WAL's allowance within store.max_size (sqlite_store)

  /// Set by a call that made a task due now (an accept, a replay): once committed, the
  /// scheduler is told (task_store::set_due_listener).
  bool made_due = false;

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

}  // namespace rebound::store::detail
