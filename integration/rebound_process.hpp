// Runs the real `rebound` binary (rebound_binary()) on a generated config, each test its own
// process, ports picked free on 127.0.0.1. Also: a generic child-process runner (used by the
// curl helper) and a one-shot run on a config expected to be refused.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace itest {

// A port nobody listens on right now (bound to 127.0.0.1:0, then released). Only for a port
// that something is about to bind: released, it can be handed to any test running alongside.
std::uint16_t free_port();

// A port that refuses connections for as long as this object lives: bound on 127.0.0.1 and
// never listened on (Linux answers a SYN to it with RST), and held, so no test running alongside
// can be given it. A released free_port() was the cause of a two-test flake: one test's "dead"
// port became the other's upstream, which then saw a request it never expected.
class RefusingPort {
 public:
  RefusingPort();
  ~RefusingPort();
  RefusingPort(const RefusingPort&) = delete;
  RefusingPort& operator=(const RefusingPort&) = delete;
  std::uint16_t port() const { return port_; }
  std::string authority() const { return "127.0.0.1:" + std::to_string(port_); }
  // From now on the port accepts: for a target that appears only after a refused connect.
  // Returns the listening descriptor, still owned by this object.
  int start_listening();

 private:
  int fd_ = -1;
  std::uint16_t port_ = 0;
};

// The rebound binary under test, and a file of the source tree (a helper script). Defined in
// paths.cpp, the one file compiled with these absolute paths: a clone at another path then
// recompiles that file alone, and ccache serves every other one.
const std::string& rebound_binary();
std::string source_path(const std::string& relative);

// A fresh directory under $TMPDIR (or /tmp); removed with remove_tree().
std::string make_temp_dir();
// VmRSS of a process in KiB, from /proc/<pid>/status (with `peak`, VmHWM: the most it ever
// held); 0 if it cannot be read.
std::size_t rss_kib(pid_t pid, bool peak = false);
// The descriptor numbers a process has open, from /proc/<pid>/fd.
std::set<int> open_fds(pid_t pid);
// ThreadSanitizer keeps ~4 bytes of shadow for every byte the process touches, and RSS counts
// them: a memory bound a test asserts is scaled by this (5) when the rebound under test is a
// TSan build. Asked of the binary itself, since REBOUND_BIN may name another build's.
std::size_t shadow_factor();
// AddressSanitizer pads every allocation with redzones and keeps its own metadata, so a
// process made of many small objects (coroutine frames, sockets' state) takes about twice the
// memory: 2 for an ASan build of rebound, else 1. For bounds per connection, not totals.
std::size_t redzone_factor();
void remove_tree(const std::string& dir);
std::string read_file(const std::string& path);
void write_file(const std::string& path, const std::string& text);

struct ProcessResult {
  int exit_code = -1;  // exit status, or -signal if killed, or -1000 on timeout
  std::string out;
  std::string err;
};

// Runs argv with `env_overrides` ("NAME=value"; a bare "NAME" removes it) added to the
// environment; kills the child after `timeout`.
ProcessResult run_process(const std::vector<std::string>& argv, const std::vector<std::string>& env_overrides,
                          std::chrono::milliseconds timeout);

// A helper process (a scripted gRPC server) that runs until this object goes: SIGKILL, reaped.
class ChildProcess {
 public:
  // Starts argv with stdout and stderr to files in a fresh temp dir.
  explicit ChildProcess(const std::vector<std::string>& argv);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  const std::string& dir() const { return dir_; }
  std::string stderr_text() const;

 private:
  std::string dir_;
  pid_t pid_ = -1;
};

struct ReboundOptions {
  int workers = 2;
  std::string drain_timeout = "2s";
  std::string unknown_hosts;    // empty: not written (allow)
  std::string attempt_timeout;  // empty: not written
  std::string max_request_head;
  std::string max_request_body;
  std::string idle_timeout;
  std::string extra;             // appended verbatim (e.g. a `dependencies:` block)
  std::string admin_token_file;  // set: `admin:` is written as {listen, token_file}
  std::string admin_allowed_hosts;  // set: `admin:` is written with allowed_hosts: [this]
  // The test asserts a bound on rebound's memory. AddressSanitizer keeps freed memory in a
  // quarantine (256 MiB by default) to catch use-after-free, so RSS grows with what was ever
  // allocated, not with what is held; such a test runs rebound with the quarantine off.
  bool measures_memory = false;
  std::vector<std::string> env;  // NAME=value, added to (or replacing in) the test's own environment
};

class ReboundProcess {
 public:
  // Starts rebound and waits (at most ~10 s) until GET /readyz on admin answers 200. Throws
  // std::runtime_error (with rebound's stderr) if it does not.
  explicit ReboundProcess(ReboundOptions options = {});
  ~ReboundProcess();
  ReboundProcess(const ReboundProcess&) = delete;
  ReboundProcess& operator=(const ReboundProcess&) = delete;

  std::uint16_t port() const { return port_; }
  std::uint16_t admin_port() const { return admin_port_; }
  pid_t pid() const { return pid_; }
  const std::string& config_text() const { return yaml_; }
  // The file given to --config; tests rewrite it before a SIGHUP.
  std::string config_path() const { return dir_ + "/rebound.yaml"; }

  void signal(int sig);
  // Exit status once the process ended within `timeout` (code, or -signal); nullopt if still running.
  std::optional<int> wait_exit(std::chrono::milliseconds timeout);
  // SIGTERM, then wait (SIGKILL after 20 s); returns the exit status (code, or -signal).
  int terminate();
  bool running() const { return pid_ > 0 && !exit_status_; }

  std::string stdout_text() const;
  // Waits until rebound's stdout (its JSON log) contains `needle`; false on timeout.
  bool wait_for_log(const std::string& needle, std::chrono::milliseconds timeout = std::chrono::seconds(10)) const;
  std::string stderr_text() const;

 private:
  bool launch();
  bool wait_ready(std::chrono::milliseconds timeout);
  bool answers_as_ours() const;

  ReboundOptions options_;
  std::string dir_;
  std::string yaml_;
  std::uint16_t port_ = 0;
  std::uint16_t admin_port_ = 0;
  pid_t pid_ = -1;
  std::optional<int> exit_status_;
};

// The inbound listener's port (`inbound.listen: 127.0.0.1:0`), from rebound's `listening`
// event; 0 when it never said.
std::uint16_t inbound_port(const ReboundProcess& rb);

// Admin GET on 127.0.0.1:admin_port; the status, or 0 if no answer.
unsigned admin_get_status(std::uint16_t admin_port, const std::string& path,
                          std::chrono::milliseconds timeout = std::chrono::seconds(3));

struct BadConfigRun {
  int exit_code = -1;
  std::string err;
  std::string path;  // the config file path as passed to --config
};

// Writes `yaml` to a file and runs `rebound --config FILE`; kills it after `timeout` (then
// exit_code = -1000: it started serving on a config that should have been refused).
BadConfigRun run_with_config(const std::string& yaml, std::chrono::milliseconds timeout = std::chrono::seconds(10));

}  // namespace itest
