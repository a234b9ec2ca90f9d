#pragma once
/** A request's dependency, looked up once when its head is vetted and handed to every step
    that needs it: the retry loop, the single-attempt path and CONNECT never look it up again.
    SPEC section 2: a configured dependency, or the defaults under the name `host:port`. */
#include "config/config.hpp"
#include "proxy/wire/error_reply.hpp"
#include "proxy/plan/request_target.hpp"
#include "proxy/runtime/session_context.hpp"

#include <memory>
#include <optional>
#include <string>

namespace rebound::retry {
class concurrency_lane;
class dependency_guard;
}
namespace rebound::upstream {
class credential_source;
class tls_client;
struct destination;
}  // namespace rebound::upstream

namespace rebound::plan {

struct dependency_route {
  std::string name;                                ///< the key of budgets, breakers, metrics and logs
  const retry::policy* policy = nullptr;          ///< for the request's method and path (SPEC 3)
  const config::dependency* dependency = nullptr;  ///< null for an unknown host
  /// Budget and breaker, held for the whole request: a reload may replace them meanwhile.
  std::shared_ptr<retry::dependency_guard> guard;
  /// This worker's share of the guard's concurrency limit (issue 51); null when it has none.
  retry::concurrency_lane* slots = nullptr;
  upstream::tls_client* tls = nullptr;      ///< the origin's TLS client when it is https://, else null
  upstream::credential_source* auth = nullptr;  ///< rebound's credential for the dependency (R-9), if configured
};

/** The dependency and policy of a request for `t`: a configured dependency, or the defaults
    under the name `host:port`. A dependency's origin is where its requests go (`t` is
    rewritten to it; the Host they carry stays the one the client named), except for CONNECT:
    a tunnel goes where the client asked, since rebound cannot see into it. */
dependency_route route_request(const config::config& cfg, request_target& t, std::string_view method, bool is_connect);

/** SPEC 2's `unknown_hosts: deny`, for every way in (HTTP/1.1, CONNECT, gRPC, the task API):
    the 403 for a route that names no configured dependency, or nullopt. */
std::optional<http::error_reply> refuse_unknown_host(const config::config& cfg, const dependency_route& r,
                                               const request_target& t);

/// Adds the dependency's guard, TLS client and credential source, from the worker and the
/// config generation the request runs on.
void attach_runtime(dependency_route& route, const runtime::session_context& ctx, const request_target& t);

/** Where a request of `route` goes, to `t` under the pool key `pool_key` (both kept alive by
    the caller): the one place an upstream::destination is made (HTTP/1.1, its single-attempt
    path, gRPC, delivery), so what the route supplies is set alike for every door: the TLS
    client, rebound's credential unless the request carries an Authorization of its own
    (SPEC 5, R-9), and the dependency's outlier ejection. The door then says how its request
    may go (`may_reuse`, `interim_to`, `pass_100`, `upgrade`). */
upstream::destination destination_of(const dependency_route& route, const request_target& t,
                                     const std::string& pool_key, bool carries_authorization);

}  // namespace rebound::plan
