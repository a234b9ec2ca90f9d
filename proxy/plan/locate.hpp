#pragma once
/** The plan's first phases, for every door that reads a target from a head (HTTP/1.1, CONNECT,
    the inbound listener, gRPC): the target (request_target.hpp), the loop guard
    (loop_guard.hpp), the dependency and route (dependency_route.hpp), `unknown_hosts: deny`.
    In that order, so a request that is refused is refused for the same reason at every door. */
#include "config/config.hpp"
#include "proxy/wire/error_reply.hpp"
#include "proxy/plan/dependency_route.hpp"
#include "proxy/plan/request_target.hpp"

#include <optional>
#include <string_view>

namespace rebound::plan {

/// What a head says of where it goes.
struct target_in {
  std::string_view method;
  std::string_view target;     ///< the request target (`:path` on HTTP/2)
  std::string_view authority;  ///< Host (`:authority`)
  std::size_t authority_count = 1;
  unsigned version = 11;
  bool passed_here = false;  ///< the head carries this process's Via entry (loop_guard.hpp)
};

/// Where it is taken: the proxy port (routed by its host, CONNECT a tunnel), or the inbound
/// listener (every request to the app, `inbound.app`, with the Host it came with).
enum class listener { proxy, inbound };

/// Where a request goes, or why it goes nowhere.
struct located {
  std::optional<http::error_reply> refusal;
  /// The refusal concerns this request alone: an HTTP/1.1 connection may carry the next one
  /// once this one's body is read. Otherwise it is closed (a target or loop it cannot trust).
  bool refusal_keeps_connection = false;
  bool is_connect = false;
  request_target target;
  dependency_route route;
};

/// Locates a request taken on `where`, by the configuration `cfg` it runs on.
void locate(located& out, const target_in& in, listener where, const config::config& cfg);

}  // namespace rebound::plan
