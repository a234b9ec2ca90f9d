#pragma once
/** A PostgreSQL connection as the fleet store's threads use it (libpq): statements prepared
    once per connection (unnamed, parsed each time, behind a transaction-mode pooler, which
    hands the server connection holding them to other clients), results in binary format,
    and a failure noted as a value (the transaction failed; the connection lost). Included by
    postgres_store*.cpp alone. */
#include <libpq-fe.h>
#include <poll.h>

#include <algorithm>
#include <atomic>
#include <chrono>

#include <cstdint>
#include <cstdlib>
#include <random>
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
  PGresult* raw() const { return r_; }
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
  /** How long a statement's answer may take (begin()'s statement_timeout, and room for the
      network). Past it the connection is given up: the server may be gone without a word, or
      a pooler may hold the statement while it cannot reach the server (PgBouncer waits
      query_wait_timeout, 120 s by default), and a caller must not wait that long. */
  std::chrono::milliseconds answer_within{12000};
  /// Set when the store is closing: a wait for an answer ends after a second.
  const std::atomic<bool>* closing = nullptr;
  /// Statements go unnamed (PQsendQueryParams): a transaction-mode pooler is in between.
  bool unnamed = false;
  /// A named statement was missing or already there: another client of a pooler used the
  /// server connection this one prepared on. Read by the store, which then goes unnamed.
  bool clashed = false;
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
    unanswered_.clear();
    lost = false;
  }

  /// `sql` prepared once on this connection (or sent unnamed), run with `params`.
  pg_result run(const std::string& sql, const std::vector<param>& params) {
    if (failed || !raw) return pg_result();
    std::vector<const char*> values;
    std::vector<int> lengths, formats;
    for (auto const& p : params) {
      values.push_back(p.value.data());
      lengths.push_back(static_cast<int>(p.value.size()));
      formats.push_back(p.binary ? 1 : 0);
    }
    auto const n = static_cast<int>(params.size());
    if (unnamed) {
      pg_result r =
          answer(PQsendQueryParams(raw, sql.c_str(), n, nullptr, values.data(), lengths.data(), formats.data(), 1));
      if (!r.ok()) note_failure(r);
      return r;
    }
    auto it = prepared_.find(sql);
    if (it == prepared_.end()) {
      // Named for this connection alone: behind a pooler that was missed, another client's
      // statement of the same name on the server connection would otherwise run in its place.
      if (prepared_.empty()) token_ = std::to_string(std::random_device{}()) + std::to_string(std::random_device{}());
      std::string name = "rb" + token_ + "_" + std::to_string(prepared_.size());
      pg_result p = answer(PQsendPrepare(raw, name.c_str(), sql.c_str(), n, nullptr));
      if (!p.ok()) {
        note_failure(p);
        return pg_result();
      }
      it = prepared_.emplace(sql, std::move(name)).first;
    }
    pg_result r =
        answer(PQsendQueryPrepared(raw, it->second.c_str(), n, values.data(), lengths.data(), formats.data(), 1));
    if (!r.ok()) note_failure(r);
    return r;
  }

  /** BEGIN, with the limits that keep a transaction from holding the xmin horizon and every
      lock it took. SET LOCAL, not a session's SET: behind a transaction-mode pooler a
      session setting lands on whichever server connection ran it, for its next clients. */
  bool begin() {
    return command(
        "BEGIN; SET LOCAL statement_timeout = '10s'; SET LOCAL lock_timeout = '5s'; "
        "SET LOCAL idle_in_transaction_session_timeout = '60s'");
  }

  /// A statement with no parameters (COMMIT, NOTIFY): true when it succeeded.
  bool command(const char* sql) { return simple(sql).ok(); }

  /// Statements with no parameters, their last result in text format (the first that failed).
  pg_result simple(const char* sql) {
    if (!raw) return pg_result();
    pg_result r = answer(PQsendQuery(raw, sql));
    if (!r.ok()) note_failure(r);
    return r;
  }

 private:
  /** The result of what `sent` (a PQsend* call's return) put on the wire, read without
      blocking past answer_within or a close: the first result that failed, or the last. On
      no answer, an empty result with the connection marked lost. */
  pg_result answer(int sent) {
    if (!sent) return pg_result();
    auto const deadline = std::chrono::steady_clock::now() + answer_within;
    PGresult* kept = nullptr;
    auto failed_result = [](PGresult* r) {
      auto const st = PQresultStatus(r);
      return st == PGRES_FATAL_ERROR || st == PGRES_BAD_RESPONSE;
    };
    for (;;) {
      while (PQisBusy(raw)) {
        auto const now = std::chrono::steady_clock::now();
        auto const left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
        // A closing store still finishes what a healthy database answers at once.
        bool const cut = closing && closing->load() && now - (deadline - answer_within) > std::chrono::seconds(1);
        if (left.count() <= 0 || cut) {
          PQclear(kept);
          // The connection is mid-statement: of no further use (note_failure says so).
          unanswered_ = cut ? "the store is closing"
                            : "no answer from the database within " + std::to_string(answer_within.count()) + " ms";
          return pg_result();
        }
        pollfd fd{PQsocket(raw), POLLIN, 0};
        ::poll(&fd, 1, static_cast<int>(std::min<std::int64_t>(left.count(), 250)));
        if (!PQconsumeInput(raw)) break;  // the connection failed: PQgetResult says so
      }
      PGresult* r = PQgetResult(raw);
      if (!r) break;
      if (kept && failed_result(kept)) {
        PQclear(r);
      } else {
        PQclear(kept);
        kept = r;
      }
      if (PQstatus(raw) == CONNECTION_BAD) break;
    }
    return pg_result(kept);
  }

  void note_failure(const pg_result& r) {
    failed = true;
    if (!unanswered_.empty()) {
      error = unanswered_;
      lost = true;
      return;
    }
    error = trimmed(r.message());
    if (error.empty()) error = trimmed(PQerrorMessage(raw));
    if (error.empty()) error = "the database refused the statement";
    // Class 08 (connection exception) and 57P0x (the server shut down or is starting): the
    // connection is of no further use even when libpq has not noticed yet.
    auto const state = r.sqlstate();
    // 42P05 duplicate_prepared_statement, 26000 invalid_sql_statement_name.
    if (!unnamed && (state == "42P05" || state == "26000")) clashed = true;
    lost = PQstatus(raw) == CONNECTION_BAD || state.starts_with("08") || state.starts_with("57P");
  }

  std::unordered_map<std::string, std::string> prepared_;
  std::string token_;       ///< in the names of the statements prepared on this connection
  std::string unanswered_;  ///< why a statement went unanswered; the connection is then lost
};

}  // namespace rebound::store::detail
