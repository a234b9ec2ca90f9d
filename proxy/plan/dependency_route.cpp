#include "proxy/plan/dependency_route.hpp"

#include "proxy/retry/dependency_guard.hpp"
#include "proxy/upstream/attempt.hpp"
#include "proxy/upstream/credential_source.hpp"
#include "proxy/auth/secure_origins.hpp"

namespace rebound::plan {

dependency_route route_request(const config::config& cfg, request_target& t, std::string_view method, bool is_connect) {
  auto const* d = cfg.find_dependency(t.host, t.port);
  if (!d) return {t.host + ":" + std::to_string(t.port), &cfg.defaults, nullptr, nullptr, nullptr, nullptr};
  auto const path = path_of(t.origin_form);
  dependency_route r{d->name, &d->policy_for(method, path), d, nullptr, nullptr, nullptr};
  if (d->origin && !is_connect) {
    t.connect_host = d->origin->host;
    t.port = d->origin->port;
    t.scheme = d->origin->scheme;  // https: rebound is the TLS client (SPEC 5)
  }
  return r;
}

std::optional<http::error_reply> refuse_unknown_host(const config::config& cfg, const dependency_route& r,
                                               const request_target& t) {
  if (r.dependency || cfg.unknown_hosts != config::unknown_hosts_policy::deny) return std::nullopt;
  return http::error_reply{403, http::error_type::unknown_host, "host " + t.authority + " is not a configured dependency", r.name,
                     0};
}

void attach_runtime(dependency_route& route, const runtime::session_context& ctx, const request_target& t) {
  route.guard = ctx.guards->find(route.name, *route.policy);
  route.slots = ctx.guards->lane_of(*route.guard);
  if (auto const* origins = ctx.origins()) {
    // The one place that decides whether an upstream connection is TLS.
    if (t.scheme == "https") route.tls = origins->tls_for(route.name);
    route.auth = origins->auth_for(route.name);
  }
}

upstream::destination destination_of(const dependency_route& route, const request_target& t,
                                     const std::string& pool_key, bool carries_authorization) {
  upstream::destination to{pool_key, t.connect_host, t.port, route.tls,
                           upstream::credential_to_apply(route.auth, carries_authorization)};
  to.health = route.guard.get();
  return to;
}

}  // namespace rebound::plan
