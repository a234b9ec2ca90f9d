#include "rebound_process.hpp"

#include "client.hpp"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <netinet/in.h>
#include <regex>
#include <spawn.h>
#include <sstream>
#include <stdexcept>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

extern char** environ;

namespace itest {

using namespace std::chrono_literals;

namespace {

// Bound to 127.0.0.1:0 without SO_REUSEADDR, so no other socket can share the port while open.
int bind_loopback_any_port(std::uint16_t& port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error("socket() failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    throw std::runtime_error("bind() to 127.0.0.1:0 failed");
  }
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  port = ntohs(addr.sin_port);
  return fd;
}

}  // namespace

std::uint16_t free_port() {
  std::uint16_t port = 0;
  ::close(bind_loopback_any_port(port));
  return port;
}

RefusingPort::RefusingPort() { fd_ = bind_loopback_any_port(port_); }

RefusingPort::~RefusingPort() { ::close(fd_); }

int RefusingPort::start_listening() {
  if (::listen(fd_, 4) != 0) throw std::runtime_error("listen() on a held port failed");
  return fd_;
}

std::size_t rss_kib(pid_t pid, bool peak) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string const field = peak ? "VmHWM:" : "VmRSS:";
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field, 0) == 0) return std::stoul(line.substr(field.size()));
  return 0;
}

std::set<int> open_fds(pid_t pid) {
  std::set<int> fds;
  std::error_code ec;
  for (auto const& e : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec))
    fds.insert(std::stoi(e.path().filename().string()));
  return fds;
}

std::string make_temp_dir() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/rebound-it-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (!::mkdtemp(buf.data())) throw std::runtime_error("mkdtemp failed");
  return buf.data();
}

void remove_tree(const std::string& dir) {
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::size_t shadow_factor() {
  // A TSan build links the TSan runtime, whose entry point its dynamic symbols name.
  static std::size_t const factor = read_file(rebound_binary()).find("__tsan_init") != std::string::npos ? 5 : 1;
  return factor;
}

std::size_t redzone_factor() {
  static std::size_t const factor = read_file(rebound_binary()).find("__asan_init") != std::string::npos ? 2 : 1;
  return factor;
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out) throw std::runtime_error("cannot write " + path);
}

namespace {

std::vector<std::string> make_env(const std::vector<std::string>& overrides) {
  std::vector<std::string> env;
  auto name_of = [](const std::string& kv) { return kv.substr(0, kv.find('=')); };
  for (char** e = environ; e && *e; ++e) {
    std::string kv = *e;
    bool replaced = false;
    for (auto const& o : overrides)
      if (name_of(o) == name_of(kv)) replaced = true;
    if (!replaced) env.push_back(kv);
  }
  for (auto const& o : overrides)
    if (o.find('=') != std::string::npos) env.push_back(o);
  return env;
}

std::vector<char*> c_strings(std::vector<std::string>& v) {
  std::vector<char*> out;
  for (auto& s : v) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

pid_t spawn(std::vector<std::string> argv, std::vector<std::string> env, const std::string& out_path,
            const std::string& err_path) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  // The child gets default signal dispositions and an empty mask (the test may block some).
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t all, none;
  sigfillset(&all);
  sigemptyset(&none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  auto cargv = c_strings(argv);
  auto cenv = c_strings(env);
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, cargv[0], &fa, &attr, cargv.data(), cenv.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) throw std::runtime_error("posix_spawn " + argv[0] + ": " + std::strerror(rc));
  return pid;
}

int decode_status(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return -WTERMSIG(status);
  return -1;
}

// Polls waitpid until the child ends or the timeout passes.
std::optional<int> poll_exit(pid_t pid, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int status = 0;
    pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return decode_status(status);
    if (r < 0 && errno != EINTR) return -1;
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(10ms);
  }
}

std::string tail(const std::string& s, std::size_t n = 4000) { return s.size() > n ? s.substr(s.size() - n) : s; }

}  // namespace

ChildProcess::ChildProcess(const std::vector<std::string>& argv) : dir_(make_temp_dir()) {
  pid_ = spawn(argv, make_env({}), dir_ + "/out", dir_ + "/err");
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    poll_exit(pid_, 10s);
  }
  remove_tree(dir_);
}

std::string ChildProcess::stderr_text() const { return read_file(dir_ + "/err"); }

ProcessResult run_process(const std::vector<std::string>& argv, const std::vector<std::string>& env_overrides,
                          std::chrono::milliseconds timeout) {
  std::string dir = make_temp_dir();
  ProcessResult result;
  try {
    pid_t pid = spawn(argv, make_env(env_overrides), dir + "/out", dir + "/err");
    auto status = poll_exit(pid, timeout);
    if (!status) {
      ::kill(pid, SIGKILL);
      poll_exit(pid, 10s);
      result.exit_code = -1000;
    } else {
      result.exit_code = *status;
    }
    result.out = read_file(dir + "/out");
    result.err = read_file(dir + "/err");
  } catch (...) {
    remove_tree(dir);
    throw;
  }
  remove_tree(dir);
  return result;
}

unsigned admin_get_status(std::uint16_t admin_port, const std::string& path, std::chrono::milliseconds timeout) {
  auto conn = RawConnection::try_connect(admin_port);
  if (!conn) return 0;
  if (!conn->send("GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")) return 0;
  auto r = conn->read_response(timeout);
  return r ? r->status : 0;
}

ReboundProcess::ReboundProcess(ReboundOptions options) : options_(std::move(options)) {
  dir_ = make_temp_dir();
  std::string last_err;
  for (int attempt = 0; attempt < 3; ++attempt) {
    if (launch()) return;
    last_err = stderr_text();
    if (!exit_status_) {  // still running but never ready
      ::kill(pid_, SIGKILL);
      poll_exit(pid_, 10s);
      pid_ = -1;
      break;
    }
    // It exited (possibly a port taken between free_port() and its bind): try new ports.
  }
  std::string msg = "rebound did not become ready; config:\n" + yaml_ + "\nstderr:\n" + tail(last_err);
  remove_tree(dir_);
  throw std::runtime_error(msg);
}

bool ReboundProcess::launch() {
  port_ = free_port();
  do admin_port_ = free_port();
  while (admin_port_ == port_);
  exit_status_.reset();
  std::ostringstream y;
  y << "listen: 127.0.0.1:" << port_ << "\n";
  y << "admin: {listen: 127.0.0.1:" << admin_port_;
  if (!options_.admin_token_file.empty()) y << ", token_file: " << options_.admin_token_file;
  if (!options_.admin_allowed_hosts.empty()) y << ", allowed_hosts: [" << options_.admin_allowed_hosts << "]";
  y << "}\n";
  y << "workers: " << options_.workers << "\n";
  y << "drain_timeout: " << options_.drain_timeout << "\n";
  if (!options_.unknown_hosts.empty()) y << "unknown_hosts: " << options_.unknown_hosts << "\n";
  if (!options_.attempt_timeout.empty()) y << "defaults:\n  attempt_timeout: " << options_.attempt_timeout << "\n";
  if (!options_.max_request_head.empty() || !options_.max_request_body.empty() || !options_.idle_timeout.empty()) {
    y << "limits:\n";
    if (!options_.max_request_head.empty()) y << "  max_request_head: " << options_.max_request_head << "\n";
    if (!options_.max_request_body.empty()) y << "  max_request_body: " << options_.max_request_body << "\n";
    if (!options_.idle_timeout.empty()) y << "  idle_timeout: " << options_.idle_timeout << "\n";
  }
  y << options_.extra;
  yaml_ = y.str();
  std::string path = dir_ + "/rebound.yaml";
  write_file(path, yaml_);
  std::vector<std::string> env = options_.env;
  if (options_.measures_memory) {
    char const* asan = std::getenv("ASAN_OPTIONS");
    env.push_back(std::string("ASAN_OPTIONS=") + (asan && *asan ? std::string(asan) + ":" : "") +
                  "quarantine_size_mb=0");
  }
  pid_ = spawn({rebound_binary(), "--config", path}, make_env(env), dir_ + "/stdout.log", dir_ + "/stderr.log");
  return wait_ready(15s);
}

/** Whether the admin port answers for this process: a concurrent test's rebound may hold the
    port this one failed to bind (taken between free_port() and the bind), and its /readyz says
    200 too. Its /config names another listen port. This one then exits, and is relaunched. */
bool ReboundProcess::answers_as_ours() const {
  auto conn = RawConnection::try_connect(admin_port_);
  if (!conn || !conn->send("GET /config HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")) return false;
  auto r = conn->read_response(1s);
  return r && r->status == 200 &&
         r->body.find("\"listen\":\"127.0.0.1:" + std::to_string(port_) + "\"") != std::string::npos;
}

bool ReboundProcess::wait_ready(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (auto st = poll_exit(pid_, 0ms)) {
      exit_status_ = *st;
      return false;
    }
    if (admin_get_status(admin_port_, "/readyz", 1s) == 200 && answers_as_ours()) return true;
    std::this_thread::sleep_for(20ms);
  }
  return false;
}

ReboundProcess::~ReboundProcess() {
  if (running()) {
    // Every test ends with the contract's SIGTERM -> exit 0 (a sanitizer report also fails here).
    int st = terminate();
    if (st != 0) ADD_FAILURE() << "rebound exited with status " << st << " after SIGTERM at teardown";
  }
  if (::testing::Test::HasFailure()) {
    std::cerr << "[rebound] config:\n"
              << yaml_ << "[rebound] stderr (tail):\n"
              << tail(stderr_text()) << "\n[rebound] stdout (tail):\n"
              << tail(stdout_text(), 3000) << "\n";
  }
  remove_tree(dir_);
}

void ReboundProcess::signal(int sig) {
  if (running()) ::kill(pid_, sig);
}

std::optional<int> ReboundProcess::wait_exit(std::chrono::milliseconds timeout) {
  if (exit_status_) return exit_status_;
  if (pid_ <= 0) return std::nullopt;
  exit_status_ = poll_exit(pid_, timeout);
  return exit_status_;
}

int ReboundProcess::terminate() {
  if (exit_status_) return *exit_status_;
  signal(SIGTERM);
  if (auto st = wait_exit(20s)) return *st;
  ::kill(pid_, SIGKILL);
  exit_status_ = poll_exit(pid_, 10s);
  std::cerr << "[rebound] did not exit within 20 s of SIGTERM; killed\n";
  return exit_status_.value_or(-1);
}

std::string ReboundProcess::stdout_text() const { return read_file(dir_ + "/stdout.log"); }

bool ReboundProcess::wait_for_log(const std::string& needle, std::chrono::milliseconds timeout) const {
  auto const deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (stdout_text().find(needle) != std::string::npos) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}
std::string ReboundProcess::stderr_text() const { return read_file(dir_ + "/stderr.log"); }

BadConfigRun run_with_config(const std::string& yaml, std::chrono::milliseconds timeout) {
  std::string dir = make_temp_dir();
  BadConfigRun out;
  out.path = dir + "/bad.yaml";
  write_file(out.path, yaml);
  auto r = run_process({rebound_binary(), "--config", out.path}, {}, timeout);
  out.exit_code = r.exit_code;
  out.err = r.err;
  remove_tree(dir);
  return out;
}

std::uint16_t inbound_port(const ReboundProcess& rb) {
  if (!rb.wait_for_log("\"listening\"")) return 0;
  std::smatch m;
  auto const text = rb.stdout_text();
  if (!std::regex_search(text, m, std::regex("\"inbound\":\"127\\.0\\.0\\.1:([0-9]+)\""))) return 0;
  return static_cast<std::uint16_t>(std::stoi(m[1]));
}

}  // namespace itest
