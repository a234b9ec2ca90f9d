#pragma once
/** Wiring: worker threads with their listeners, the admin listener, signals and drain.

    Each worker owns one single-threaded io_context with its own SO_REUSEPORT listener and
    upstream pool (the nginx/Envoy worker model), so a connection's state never crosses
    threads; the kernel spreads new connections over the workers. */
#include "config/config.hpp"
#include "proxy/observe/log.hpp"

#include <memory>

namespace rebound::app {

struct run_options {
  std::string config_path;        ///< what SIGHUP reloads; empty = built-in defaults
  bool log_level_pinned = false;  ///< --log-level given: a reload does not change the level
};

/** Binds the listeners (throws std::runtime_error naming the address if one cannot be
    bound), serves until SIGTERM/SIGINT and a drain, reloading the config on SIGHUP, and
    returns the process exit code. */
int run(std::shared_ptr<const config::config> cfg, observe::logger& log, const run_options& options);

}  // namespace rebound::app
