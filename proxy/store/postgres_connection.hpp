#pragma once
/** A PostgreSQL connection as the fleet store's threads use it (libpq): statements prepared
    once per connection, results in binary format, and a failure noted as a value (the
    transaction failed; the connection lost). Included by postgres_store*.cpp alone. */
#include <libpq-fe.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace rebound::store::detail {

/// A parameter of a statement: text, or bytes sent in binary (bytea).
struct param {
  std::string value;
  bool binary = false;
};
inline param text(std::string_view v) { return {std::string(v), false}; }
inline param number(std::int64_t v) { return {std::to_string(v), false}; }
inline param bytes(std::string_view v) { return {std::string(v), true}; }

inline std::string trimmed(const char* message) {
  std::string s = message ? message : "";
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

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
  bool failed = false;   ///< a statement of the current transaction failed
  bool lost = false;     ///< the server is gone: reconnect
  bool notify = false;   ///< the current transaction made tasks due: NOTIFY before COMMIT
  bool counted = false;  ///< counted in the store's connections up
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
    pg_result r(PQexecPrepared(raw, it->second.c_str(), static_cast<int>(params.size()), values.data(), lengths.data(),
                               formats.data(), 1));
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

}  // namespace rebound::store::detail
