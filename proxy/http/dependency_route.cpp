#include "proxy/http/dependency_route.hpp"

#include "proxy/upstream/secure_origins.hpp"

namespace rebound::http {

dependency_route route_request(const config::config& cfg, request_target& t, std::string_view method, bool is_connect) {
  auto const* d = cfg.find_dependency(t.host, t.port);
  if (!d) return {t.host + ":" + std::to_string(t.port), &cfg.defaults, nullptr, nullptr, nullptr, nullptr};
  auto const path = std::string_view(t.origin_form).substr(0, t.origin_form.find('?'));
  dependency_route r{d->name, &d->policy_for(method, path), d, nullptr, nullptr, nullptr};
  if (d->origin && !is_connect) {
    t.connect_host = d->origin->host;
    t.port = d->origin->port;
    t.scheme = d->origin->scheme;  // https: rebound is the TLS client (SPEC 5)
  }
  return r;
}

void attach_runtime(dependency_route& route, const session_context& ctx, const request_target& t) {
  route.guard = ctx.guards->find(route.name, *route.policy);
  if (auto const* origins = ctx.origins()) {
    // The one place that decides whether an upstream connection is TLS.
    if (t.scheme == "https") route.tls = origins->tls_for(route.name);
    route.auth = origins->auth_for(route.name);
  }
}

}  // namespace rebound::http
