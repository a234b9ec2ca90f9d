#pragma once
/** The admin API (SPEC section 7) on its own listener: health, readiness, metrics, the
    per-dependency state and the effective config. */
#include "proxy/net.hpp"
#include "proxy/retry/dependency_guard.hpp"
#include "proxy/observe/log.hpp"

#include <atomic>

namespace rebound::store {
class task_store;
}
namespace rebound::config {
struct config;
}

namespace rebound::admin {

struct admin_state {
  std::atomic<bool> ready{false};                 ///< listeners up and config loaded; false again while draining
  const retry::guard_registry* guards = nullptr;  ///< for GET /dependencies
  const observe::metrics* metrics = nullptr;      ///< for GET /metrics
  std::shared_ptr<const config::config> cfg;      ///< for GET /config; a reload replaces it
  store::task_store* store = nullptr;             ///< for the task API; null when nothing is handed over
  std::string admin_base;                         ///< http://ADMIN, the base of a submitted task's Location
};

/// Accepts admin connections until the acceptor is closed. `state` must outlive the io_context.
net::awaitable<void> run_admin_listener(tcp_acceptor& acceptor, const admin_state& state, const observe::logger& log);

}  // namespace rebound::admin
