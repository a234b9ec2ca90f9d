#include "pg_server.hpp"

#include <libpq-fe.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <glob.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

namespace itest {
namespace {

std::string quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

/// Debian installs each major version under /usr/lib/postgresql/<major>/bin; the newest wins.
std::string server_bin_dir() {
  if (char const* env = std::getenv("REBOUND_PG_BIN")) return env;
  glob_t g{};
  std::vector<std::string> found;
  if (::glob("/usr/lib/postgresql/*/bin/initdb", 0, nullptr, &g) == 0)
    for (std::size_t i = 0; i < g.gl_pathc; ++i) found.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
  if (found.empty())
    throw std::runtime_error("no PostgreSQL server found under /usr/lib/postgresql (scripts/install-deps installs it)");
  std::sort(found.begin(), found.end(), [](const std::string& a, const std::string& b) {
    return std::stoi(a.substr(20)) < std::stoi(b.substr(20));  // after "/usr/lib/postgresql/"
  });
  return std::filesystem::path(found.back()).parent_path().string();
}

std::uint16_t unused_port() {
  int const fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    ::close(fd);
    throw std::runtime_error("no free port");
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

/// PostgreSQL refuses to run as root: a root test run hands the server to `nobody`.
bool running_as_root() { return ::geteuid() == 0; }
std::string as_server_user(const std::string& command) {
  return running_as_root() ? "runuser -u nobody -- " + command : command;
}

/// The server's own directories (data, sockets, logs) live here. As root the server runs as
/// nobody, who must reach them: /tmp, not a $TMPDIR that may sit under root's home.
std::filesystem::path scratch_base() {
  return running_as_root() ? std::filesystem::path("/tmp") : std::filesystem::temp_directory_path();
}

void hand_to_server_user(const std::string& path) {
  if (!running_as_root()) return;
  passwd const* nobody = ::getpwnam("nobody");
  if (!nobody) throw std::runtime_error("no user nobody to run PostgreSQL as");
  if (::chown(path.c_str(), nobody->pw_uid, nobody->pw_gid) != 0) throw std::runtime_error("chown " + path + " failed");
}

std::string new_scratch_dir(const std::string& stem) {
  std::string tmpl = (scratch_base() / (stem + "-XXXXXX")).string();
  if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
  return tmpl;
}

/// initdb takes seconds; copying a cluster takes a fraction of one. So initdb runs once per
/// machine, user and server version, into a template cluster (made under a lock, published by a
/// rename, so parallel tests and interrupted runs never see half of one), and every server
/// starts from a copy of it: each test still has its own server to stop, crash or fill.
std::string template_cluster(const std::string& bin) {
  auto const version = std::filesystem::path(bin).parent_path().filename().string();  // the major
  auto const name = "rebound-pg-template-v1-" + version + "-" + std::to_string(::geteuid());
  auto const ready = scratch_base() / name;
  if (std::filesystem::exists(ready / "ready")) return ready.string();
  auto const lock_path = (scratch_base() / (name + ".lock")).string();
  int const lock = ::open(lock_path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600);
  if (lock < 0 || ::flock(lock, LOCK_EX) != 0) throw std::runtime_error("cannot lock " + lock_path);
  struct unlock {
    int fd;
    ~unlock() { ::close(fd); }
  } const unlock_at_exit{lock};
  if (std::filesystem::exists(ready / "ready")) return ready.string();
  auto const staging = new_scratch_dir(name + "-staging");
  std::random_device rd;
  {
    std::ofstream pw(staging + "/password");
    pw << "pg-" << rd() << "-" << rd() << "\n";  // as an editor leaves it: the store trims the line end
  }
  hand_to_server_user(staging);
  hand_to_server_user(staging + "/password");
  std::string const init = as_server_user(quoted(bin + "/initdb") + " -D " + quoted(staging + "/data") +
                                          " -U rebound --pwfile=" + quoted(staging + "/password") +
                                          " -A scram-sha-256 -N --no-instructions -E UTF8 --locale=C > " +
                                          quoted(staging + "/initdb.log") + " 2>&1");
  if (std::system(init.c_str()) != 0) {
    auto const log = read_all(staging + "/initdb.log");
    std::error_code ignored;
    std::filesystem::remove_all(staging, ignored);
    throw std::runtime_error("initdb failed: " + log);
  }
  std::ofstream(staging + "/ready") << "initdb done\n";
  std::error_code ignored;
  std::filesystem::remove_all(ready, ignored);  // without its marker it was never finished: not to be trusted
  std::filesystem::rename(staging, ready);
  return ready.string();
}

}  // namespace

PgServer::PgServer() : bin_(server_bin_dir()) {
  auto const cluster = template_cluster(bin_);
  dir_ = new_scratch_dir("rebound-pg");
  hand_to_server_user(dir_);
  // cp -a keeps the owner (nobody) and the 0700 mode the server insists on.
  std::string const copy = "cp -a " + quoted(cluster + "/data") + " " + quoted(dir_ + "/data") + " && cp -a " +
                           quoted(cluster + "/password") + " " + quoted(password_file());
  if (std::system(copy.c_str()) != 0) throw std::runtime_error("cannot copy the template cluster " + cluster);
  password_ = read_all(password_file());
  while (!password_.empty() && (password_.back() == '\n' || password_.back() == '\r')) password_.pop_back();
  // A port taken between the probe and the bind fails the start: try another.
  for (int tries = 0;; ++tries) {
    port_ = unused_port();
    try {
      start();
      break;
    } catch (const std::runtime_error&) {
      if (tries == 4) throw;
    }
  }
}

PgServer::~PgServer() {
  if (running_) {
    try {
      pg_ctl("stop -m immediate");
    } catch (...) {
    }
  }
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

std::string PgServer::dsn(const std::string& database) const {
  return "host=127.0.0.1 port=" + std::to_string(port_) + " dbname=" + database + " user=rebound";
}

std::string PgServer::new_database() {
  auto name = "test_" + std::to_string(++databases_);
  query("CREATE DATABASE " + name);
  return name;
}

void PgServer::pg_ctl(const std::string& args) const {
  std::string const cmd = as_server_user(quoted(bin_ + "/pg_ctl") + " -D " + quoted(dir_ + "/data") + " -w -t 30 " +
                                         args + " >> " + quoted(dir_ + "/pg_ctl.log") + " 2>&1");
  if (std::system(cmd.c_str()) != 0)
    throw std::runtime_error("pg_ctl " + args + " failed: " + read_all(dir_ + "/pg_ctl.log") +
                             read_all(dir_ + "/server.log"));
}

void PgServer::start() {
  // fsync off: these servers are thrown away, and a crash() kills processes, not the kernel,
  // so what they wrote survives in the page cache all the same.
  pg_ctl("-l " + quoted(dir_ + "/server.log") + " -o " +
         quoted("-c listen_addresses=127.0.0.1 -p " + std::to_string(port_) + " -c unix_socket_directories=" + dir_ +
                " -c fsync=off -c max_connections=200") +
         " start");
  running_ = true;
}

void PgServer::stop() {
  pg_ctl("stop -m fast");
  running_ = false;
}

void PgServer::crash() {
  pg_ctl("stop -m immediate");
  running_ = false;
}

PgServer& PgServer::shared() {
  static PgServer pg;
  return pg;
}

std::string PgServer::query(const std::string& sql, const std::string& database) const {
  std::string const conninfo = dsn(database) + " password=" + password_;
  PGconn* c = PQconnectdb(conninfo.c_str());
  if (PQstatus(c) != CONNECTION_OK) {
    std::string why = PQerrorMessage(c);
    PQfinish(c);
    throw std::runtime_error("cannot connect to the test database: " + why);
  }
  PGresult* r = PQexec(c, sql.c_str());
  auto const status = PQresultStatus(r);
  std::string out;
  bool const ok = status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK;
  std::string const why = ok ? "" : PQresultErrorMessage(r);
  if (ok && PQntuples(r) > 0 && PQnfields(r) > 0) out = PQgetvalue(r, 0, 0);
  PQclear(r);
  PQfinish(c);
  if (!ok) throw std::runtime_error(sql + ": " + why);
  return out;
}

PgBouncer::PgBouncer(const PgServer& server, unsigned server_pool, unsigned query_wait_timeout) {
  dir_ = new_scratch_dir("rebound-pgbouncer");
  hand_to_server_user(dir_);
  {
    // Its own password file: PgBouncer answers the clients' scram with it and logs in to the
    // server with it.
    std::ofstream users(dir_ + "/users.txt");
    users << "\"rebound\" \"" << server.password() << "\"\n";
  }
  hand_to_server_user(dir_ + "/users.txt");
  for (int tries = 0;; ++tries) {
    port_ = unused_port();
    {
      std::ofstream ini(dir_ + "/pgbouncer.ini");
      ini << "[databases]\n* = host=127.0.0.1 port=" << server.port() << "\n"
          << "[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = " << port_ << "\nunix_socket_dir =\n"
          << "auth_type = scram-sha-256\nauth_file = " << dir_ << "/users.txt\n"
          << "pool_mode = transaction\ndefault_pool_size = " << server_pool << "\nmax_client_conn = 2000\n"
          << "query_wait_timeout = " << query_wait_timeout << "\nserver_login_retry = 1\n"
          << "logfile = " << dir_ << "/pgbouncer.log\npidfile = " << dir_ << "/pgbouncer.pid\n";
    }
    hand_to_server_user(dir_ + "/pgbouncer.ini");
    std::string const cmd = as_server_user("/usr/sbin/pgbouncer -d " + quoted(dir_ + "/pgbouncer.ini")) + " >> " +
                            quoted(dir_ + "/start.log") + " 2>&1";
    if (std::system(cmd.c_str()) != 0)
      throw std::runtime_error("pgbouncer did not start: " + read_all(dir_ + "/start.log") +
                               read_all(dir_ + "/pgbouncer.log"));
    // -d returns once it forked; it is up when it answers.
    std::string const conninfo = "host=127.0.0.1 port=" + std::to_string(port_) + " dbname=postgres connect_timeout=1";
    for (int i = 0; i < 100 && pid_ == 0; ++i) {
      if (PQping(conninfo.c_str()) == PQPING_OK) pid_ = std::atoi(read_all(dir_ + "/pgbouncer.pid").c_str());
      if (pid_ == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (pid_ > 0) return;
    stop();
    if (tries == 4) throw std::runtime_error("pgbouncer did not answer: " + read_all(dir_ + "/pgbouncer.log"));
  }
}

void PgBouncer::stop() {
  int const pid = pid_ ? pid_ : std::atoi(read_all(dir_ + "/pgbouncer.pid").c_str());
  pid_ = 0;
  if (pid <= 0) return;
  ::kill(pid, SIGTERM);  // 1.18: immediate shutdown
  for (int i = 0; i < 100 && ::kill(pid, 0) == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

PgBouncer::~PgBouncer() {
  stop();
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

std::string PgBouncer::dsn(const std::string& database) const {
  return "host=127.0.0.1 port=" + std::to_string(port_) + " dbname=" + database + " user=rebound";
}

}  // namespace itest
