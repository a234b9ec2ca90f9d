#pragma once
/** What a worker hands each request it serves, whichever way it came in: the config it runs
    on and the worker's shared parts (pool, log, guards, store...). Only declarations: a file
    that passes the context on needs none of those parts' headers. */
#include <atomic>
#include <memory>
#include <random>
#include <string_view>

namespace rebound::config {
struct config;
}
namespace rebound::observe {
class logger;
class tracer;
}  // namespace rebound::observe
namespace rebound::retry {
class guard_cache;
}
namespace rebound::upstream {
class pool;
}
namespace rebound::auth {
class secure_origins;
}
namespace rebound::store {
class task_store;
}
namespace rebound::h2 {
class client_pool;
}

namespace rebound::runtime {

class relay_buffers;
class retry_buffer;
class session_registry;

/** A config and what was built from it (the TLS clients and credential sources of its
    dependencies): a reload swaps both as one value, so a request never pairs the config of
    one generation with the TLS origins of another. */
struct running_config {
  std::shared_ptr<const config::config> cfg;
  std::shared_ptr<const auth::secure_origins> origins;
};

/// What a worker gives each of its sessions.
struct session_context {
  /// The config this request runs on, and what was built from it.
  std::shared_ptr<const running_config> running;
  /// The worker's current one, taken at the start of each request: a reload changes it for
  /// new requests while a request in flight finishes on the one it started with.
  const std::shared_ptr<const running_config>* latest = nullptr;
  upstream::pool* pool = nullptr;
  const observe::logger* log = nullptr;
  session_registry* sessions = nullptr;
  std::mt19937_64* rng = nullptr;        ///< the worker's: backoff jitter draws from it (R-1)
  retry::guard_cache* guards = nullptr;  ///< the worker's view of the per-dependency budgets and breakers (R-7)
  std::string_view instance_token;       ///< this process's mark in the Via of what it forwards (loop_guard.hpp)
  std::atomic<std::size_t>* open_connections = nullptr;  ///< client connections of all workers
  /// Where handed-over calls are kept (async delivery); null when the config hands none over.
  store::task_store* store = nullptr;
  /// The admin listener's address as clients reach it: the base of a handed-over task's Location.
  std::string_view admin_base;
  /// A session of the inbound listener: every request goes to `inbound.app`, through the
  /// idempotency gate where a route asks for it (inbound/).
  bool inbound = false;
  /// The worker's spare body buffers (relay.hpp); null: each relay takes its own.
  relay_buffers* buffers = nullptr;
  /// The worker's HTTP/2 upstream connections, for calls that arrive over HTTP/2 (gRPC).
  h2::client_pool* h2_pool = nullptr;
  /// The process's budget for request bodies kept for a retry (limits.retry_buffer).
  retry_buffer* kept_bodies = nullptr;
  /// Where spans go (`tracing:`); null: tracing is off.
  observe::tracer* tracer = nullptr;

  const config::config& cfg() const { return *running->cfg; }
  const auth::secure_origins* origins() const { return running->origins.get(); }
};

}  // namespace rebound::runtime
