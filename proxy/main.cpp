// The command line (SPEC section 1): run | check | health | --version | --help.
#include "config/load.hpp"
#include "config/typed_values.hpp"
#include "proxy/admin/health_probe.hpp"
#include "proxy/app/server.hpp"
#include "proxy/observe/json.hpp"
#include "proxy/observe/log.hpp"
#include "proxy/upstream/tls_client.hpp"

#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <string_view>
#include <system_error>

namespace {

constexpr std::string_view usage =
    "usage: rebound [--config FILE] [--log-level trace|debug|info|warn|error|off]\n"
    "       rebound check FILE [--format text|json]\n"
    "       rebound health [--admin HOST:PORT | --config FILE] [--ready]\n"
    "       rebound --version | --help\n"
    "\n"
    "Without --config, rebound runs on its built-in defaults: the forward proxy on\n"
    "127.0.0.1:3128 (HTTP_PROXY=http://127.0.0.1:3128) and the admin API on 127.0.0.1:9901.\n";

/// `check --format json`: one object, stable for CI annotations (docs/configuration.md: Command line).
std::string findings_json(const std::string& file, bool valid, const std::vector<rebound::config::diagnostic>& ds) {
  std::string out;
  rebound::observe::json_writer w(out);
  w.open_object().field("file", file).field("valid", valid).key("findings").open_array();
  for (auto const& d : ds) {
    w.open_object().field("level", d.warning ? "warning" : "error").field("line", d.line).field("column", d.column);
    w.field("path", d.path).field("rule", d.rule).field("message", d.message).close_object();
  }
  w.close_array().close_object();
  return out += '\n';
}

/** What start-up would refuse beyond the loader: a CA bundle or client certificate that is
    readable but not usable (not PEM, a key that does not match). Files that cannot be read
    here were warned about already (CI runs check where they are not mounted). */
std::vector<rebound::config::diagnostic> unusable_tls_files(const std::string& file,
                                                            const rebound::config::config& cfg) {
  std::vector<rebound::config::diagnostic> out;
  for (auto const& d : cfg.dependencies) {
    if (!d.tls || !d.origin) continue;
    bool all_readable = true;
    for (auto const* f : {&d.tls->ca_file, &d.tls->client_cert, &d.tls->client_key})
      if (!f->empty() && ::access(f->c_str(), R_OK) != 0) all_readable = false;
    if (!all_readable) continue;
    try {
      rebound::upstream::tls_client probe(*d.tls, d.origin->host);
    } catch (const std::exception& e) {
      out.push_back({file, 0, 0, "dependencies." + d.name + ".tls", e.what(), {}});
    }
  }
  return out;
}

/// SPEC 1: exit 0 clean or warnings only, 1 errors, 2 unreadable or malformed.
int check(const std::string& file, std::string_view format) {
  std::vector<rebound::config::diagnostic> warnings;
  try {
    auto const cfg = rebound::config::load_config_file(file, &warnings);
    if (auto errors = unusable_tls_files(file, cfg); !errors.empty()) {
      errors.insert(errors.end(), warnings.begin(), warnings.end());
      throw rebound::config::config_error(std::move(errors));
    }
    if (format == "json") {
      std::cout << findings_json(file, true, warnings);
    } else {
      for (auto const& w : warnings) std::cout << rebound::config::to_string(w) << "\n";
      std::cout << file << ": ok"
                << (warnings.empty()
                        ? ""
                        : " (" + std::to_string(warnings.size()) + (warnings.size() == 1 ? " warning)" : " warnings)"))
                << "\n";
    }
    return 0;
  } catch (const rebound::config::config_error& e) {
    if (format == "json")
      std::cout << findings_json(file, false, e.diagnostics());
    else
      std::cerr << e.what();
    return e.malformed() ? 2 : 1;
  }
}

/** `rebound health`: exit 0 when the admin API answers 200 on /healthz (/readyz with
    --ready) within 2 s, 1 when it does not, 2 on a usage error. The address is --admin's,
    else the admin of --config's file, else the built-in 127.0.0.1:9901. */
int health(int argc, char** argv) {
  std::string admin, config_file, path = "/healthz";
  for (int i = 2; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "--ready")
      path = "/readyz";
    else if ((a == "--admin" || a == "--config" || a == "-c") && i + 1 < argc)
      (a == "--admin" ? admin : config_file) = argv[++i];
    else {
      std::cerr << "rebound health: unexpected \"" << a << "\"\n" << usage;
      return 2;
    }
  }
  rebound::config::endpoint at = rebound::config::default_config().admin;
  if (!admin.empty()) {
    auto parsed = rebound::config::parse_endpoint(admin);
    if (!parsed.value) {
      std::cerr << "rebound health: --admin: " << parsed.error << "\n";
      return 2;
    }
    at = *parsed.value;
  } else if (!config_file.empty()) {
    try {
      at = rebound::config::load_config_file(config_file).admin;
    } catch (const rebound::config::config_error& e) {
      std::cerr << e.what();
      return 2;
    }
  }
  auto const r = rebound::admin::probe_admin(at.host, at.port, path, std::chrono::seconds(2));
  (r.healthy ? std::cout : std::cerr) << (r.healthy ? "healthy: " : "unhealthy: ") << path << " on " << at.host << ":"
                                      << at.port << ": " << r.detail << "\n";
  return r.healthy ? 0 : 1;
}

/// `rebound check FILE [--format text|json]`: its arguments, then the check.
int check_command(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "rebound check: missing FILE\n" << usage;
    return 2;
  }
  std::string format = "text";
  if (argc == 5 && std::string_view(argv[3]) == "--format")
    format = argv[4];
  else if (argc != 3) {
    std::cerr << usage;
    return 2;
  }
  if (format != "text" && format != "json") {
    std::cerr << "rebound check: --format must be text or json\n";
    return 2;
  }
  return check(argv[2], format);
}

/// Every client and upstream connection is a descriptor; the usual soft limit of 1024 would
/// cap a sidecar at a few hundred waiting requests. The hard limit is the operator's.
void raise_descriptor_limit() {
  if (rlimit nofile{}; getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    setrlimit(RLIMIT_NOFILE, &nofile);
  }
}

}  // namespace

/** glibc keeps 7 freed blocks per size for each thread to reuse. With dozens of requests in
    flight, a worker frees and takes more coroutine frames of one size than that between
    requests, and the rest go through malloc's bins: 7% more user-space instructions per
    request at 64 connections than with 64 kept (bench/README.md). 256 took ~10% off the CPU
    per request at 1,000 connections but cost ~5% at 64 and kept ~1.2 MiB of freed blocks
    from malloc_trim (ninth round), so 64 stays. The depth is a tunable glibc reads only
    when a process starts, so rebound starts itself again once, with it set, unless the
    operator set it. Without /proc it runs on glibc's default. */
void deepen_malloc_cache(char** argv) {
  constexpr std::string_view tunable = "glibc.malloc.tcache_count";
  char const* set = std::getenv("GLIBC_TUNABLES");
  std::string value = set ? set : "";
  if (value.find(tunable) != std::string::npos) return;
  value += (value.empty() ? "" : ":") + std::string(tunable) + "=64";
  if (::setenv("GLIBC_TUNABLES", value.c_str(), 1) != 0) return;
  ::execv("/proc/self/exe", argv);
}

void tune_malloc(char** argv) {
  deepen_malloc_cache(argv);
  // Each exchange allocates and frees a few frames of 16-40 KiB; with glibc's default
  // dynamic thresholds a worker arena trims and regrows its heap (madvise) over and over.
  // A fixed trim threshold keeps that memory for the next request; what a burst leaves goes
  // back every few seconds instead (app::return_freed_memory).
  mallopt(M_TRIM_THRESHOLD, 8 << 20);
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
}

int main(int argc, char** argv) {
  std::string config_path;
  std::string log_level;  // empty: the config's log_level
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    auto value = [&](std::string_view name) -> std::string {
      if (i + 1 >= argc) {
        std::cerr << "rebound: " << name << " needs a value\n" << usage;
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      std::cout << usage;
      return 0;
    } else if (a == "--version") {
      std::cout << "rebound " << REBOUND_VERSION << "\n";
      return 0;
    } else if (a == "health" && i == 1) {
      return health(argc, argv);
    } else if (a == "check" && i == 1) {
      return check_command(argc, argv);
    } else if (a == "--config" || a == "-c") {
      config_path = value(a);
    } else if (a == "--log-level") {
      log_level = value(a);
    } else {
      std::cerr << "rebound: unknown argument \"" << a << "\"\n" << usage;
      return 2;
    }
  }
  if (!log_level.empty() && log_level != "trace" && log_level != "debug" && log_level != "info" &&
      log_level != "warn" && log_level != "error" && log_level != "off") {
    std::cerr << "rebound: --log-level must be one of trace, debug, info, warn, error, off\n";
    return 2;
  }

  tune_malloc(argv);  // before any thread starts, and only to serve
  std::shared_ptr<const rebound::config::config> cfg;
  std::vector<rebound::config::diagnostic> warnings;
  try {
    cfg = std::make_shared<const rebound::config::config>(
        config_path.empty() ? rebound::config::default_config()
                            : rebound::config::load_config_file(config_path, &warnings));
  } catch (const rebound::config::config_error& e) {
    std::cerr << e.what();
    return 2;
  }
  std::signal(SIGPIPE, SIG_IGN);
  raise_descriptor_limit();
  rebound::observe::logger log(log_level.empty() ? cfg->log_level : log_level);
  for (auto const& w : warnings)
    log.warn("config_warning", {{"finding", rebound::config::to_string(w)}, {"rule", w.rule}});
  try {
    return rebound::app::run(cfg, log, {config_path, !log_level.empty()});
  } catch (const std::exception& e) {
    // Start-up only (binding the listeners, starting threads): Boost.Asio throws
    // boost::system::system_error, which is not a std::system_error.
    log.error("startup_failed", {{"message", e.what()}});
    std::cerr << "rebound: cannot start: " << e.what() << "\n";
    return 1;
  }
}
