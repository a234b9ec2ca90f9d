#pragma once
/** Wiring: worker threads with their listeners, the admin listener, signals and drain.

    Each worker owns one single-threaded io_context with its own SO_REUSEPORT listener and
    upstream pool (the nginx/Envoy worker model), so a connection's state never crosses
    threads; the kernel spreads new connections over the workers. */
#include "config/config.hpp"
#include "proxy/observe/log.hpp"

#include <memory>

namespace rebound::app {

/** Binds the listeners (throws std::system_error if one cannot be bound), serves until
    SIGTERM/SIGINT and a drain, and returns the process exit code. */
int run(std::shared_ptr<const config::config> cfg, const observe::logger& log);

}  // namespace rebound::app
