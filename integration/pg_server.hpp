// A throwaway PostgreSQL server for one test: Debian's own binaries (initdb, pg_ctl), a data
// directory under $TMPDIR copied from a template cluster that initdb made once (pg_server.cpp),
// 127.0.0.1 on a free port, password authentication (scram). Run as
// `nobody` when the tests run as root, since PostgreSQL refuses to run as root. No mock: the
// stores and the fleet tests talk to a real server, which a test can stop, start and crash.
#pragma once

#include <cstdint>
#include <string>

namespace itest {

class PgServer {
 public:
  /// A copy of the template cluster, started; throws std::runtime_error (with the server's log) when it cannot.
  PgServer();
  /// Stops the server at once and removes its directory.
  ~PgServer();
  PgServer(const PgServer&) = delete;
  PgServer& operator=(const PgServer&) = delete;

  /// libpq's connection string for `database`, without the password (see password_file()).
  std::string dsn(const std::string& database = "postgres") const;
  /** A new, empty database on this server, for one test of a suite that shares the server
      (a test that stops or crashes the server owns one instead); returns its name. */
  std::string new_database();
  std::uint16_t port() const { return port_; }
  const std::string& password() const { return password_; }
  /// A file holding the password, as store.password_file reads it.
  std::string password_file() const { return dir_ + "/password"; }

  /// A clean shutdown (pg_ctl stop -m fast); start() brings it back on the same port and data.
  void stop();
  void start();
  /// The server's processes killed (pg_ctl stop -m immediate): a crash, recovered at start().
  void crash();

  /// The first column of the first row of `sql` on `database` (empty when there is none);
  /// throws on an error. For assertions on what the store wrote.
  std::string query(const std::string& sql, const std::string& database = "postgres") const;

  /** The one server a test binary shares, started on first use and stopped at exit: tests
      that never stop or crash their server take a new_database() on it instead of starting
      a server each (a start costs about a second). */
  static PgServer& shared();

 private:
  void pg_ctl(const std::string& args) const;
  std::string dir_;
  std::string bin_;
  std::string password_;
  std::uint16_t port_ = 0;
  bool running_ = false;
  unsigned databases_ = 0;
};

/** Debian's PgBouncer in transaction pooling mode in front of a PgServer, as a large fleet
    reaches its database: its own scratch directory, 127.0.0.1 on a free port, scram
    authentication with the server's password, `server_pool` server connections per database
    shared by every client, and the settings the docs recommend (server_login_retry 1 s: its
    default 15 s keeps a fleet away from a database that came back). Run as `nobody` when the tests run as root (it refuses root). */
class PgBouncer {
 public:
  /// `query_wait_timeout`: how long a client's statement waits for a server connection
  /// (PgBouncer's default is 120 s; the docs recommend 5).
  explicit PgBouncer(const PgServer& server, unsigned server_pool = 4, unsigned query_wait_timeout = 5);
  /// Stops it at once and removes its directory.
  ~PgBouncer();
  PgBouncer(const PgBouncer&) = delete;
  PgBouncer& operator=(const PgBouncer&) = delete;

  /// libpq's connection string through the pooler, without the password (the server's).
  std::string dsn(const std::string& database = "postgres") const;
  std::uint16_t port() const { return port_; }

 private:
  void stop();
  std::string dir_;
  std::uint16_t port_ = 0;
  int pid_ = 0;
};

}  // namespace itest
