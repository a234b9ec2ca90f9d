// The inbound listener: `inbound:` (its app, its routes and their idempotency keys).
#include "config/schema_reader.hpp"

#include "config/check.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cctype>

namespace rebound::config {

void reader::read_inbound(const YAML::Node& n, const std::string& path, inbound_settings& in) {
  if (!expect_map(n, path)) return;
  check_keys(n, path, {"listen", "app", "attempt_timeout", "claim_lease", "max_body", "principal_header", "routes"});
  typed(n, "principal_header", path, in.principal_header, parse_header_name);
  in.configured = true;
  for (auto const* key : {"listen", "app"})
    if (!n[key])
      error(n, join(path, key),
            std::string("required: the ") + (std::string_view(key) == "app"
                                                 ? "app's address (127.0.0.1:3000)"
                                                 : "address rebound listens on for the app's callers"));
  typed(n, "listen", path, in.listen, parse_endpoint);
  typed(n, "app", path, in.app, parse_endpoint);
  typed(n, "attempt_timeout", path, in.forward.attempt_timeout, parse_duration);
  typed(n, "max_body", path, in.max_body, parse_size);
  typed(n, "claim_lease", path, in.claim_lease, parse_duration);
  if (!n["claim_lease"])
    in.claim_lease = std::max<duration>(std::chrono::seconds(60), in.forward.attempt_timeout);
  else if (in.claim_lease < in.forward.attempt_timeout)
    error(n["claim_lease"], join(path, "claim_lease"),
          "must be at least attempt_timeout: a key is held while its request may be at the app", "R-6");
  if (in.max_body == 0 || in.max_body > (64u << 20))
    error(n["max_body"], join(path, "max_body"), "must be between 1B and 64MiB");
  // One layer retries: the caller retries, rebound passes each request to the app once.
  in.forward.max_retries = 0;
  in.forward.idempotency.inject = false;
  in.forward.dead_letter = false;                       // never handed over: the app's callers wait for its answer
  in.forward.circuit_breaker.mode = breaker_mode::off;  // the caller sees the app's own failures
  in.forward.total_timeout = in.forward.attempt_timeout;
  auto const routes = n["routes"];
  if (!routes) return;
  auto const rpath = join(path, "routes");
  if (!routes.IsSequence()) {
    error(routes, rpath, "expected a list of routes, each with `match` and `idempotency` or `dedupe`");
    return;
  }
  for (std::size_t i = 0; i < routes.size(); ++i) {
    auto const ipath = rpath + "[" + std::to_string(i) + "]";
    auto const body = routes[i];
    if (!expect_map(body, ipath)) continue;
    check_keys(body, ipath, {"match", "idempotency", "dedupe"});
    inbound_route r;
    read_inbound_route(body, ipath, r);
    if (!r.idempotency.enabled && r.dedupe.header.empty())
      error(body, ipath, "a route needs `idempotency` or `dedupe`");
    in.routes.push_back(std::move(r));
  }
}

/// One inbound route's `match`, `idempotency` (R-6: keys kept 24 h at least) and `dedupe`
/// (event ids kept 7 days at least).
void reader::read_inbound_route(const YAML::Node& body, const std::string& ipath, inbound_route& r) {
  if (auto m = body["match"]) read_match(m, join(ipath, "match"), r.match);
  if (auto i2 = body["idempotency"]; i2 && expect_map(i2, join(ipath, "idempotency"))) {
    auto const p2 = join(ipath, "idempotency");
    check_keys(i2, p2, {"require", "ttl", "scope", "mismatch_status"});
    auto& s = r.idempotency;
    s.enabled = true;
    typed(i2, "require", p2, s.require, parse_bool);
    typed(i2, "ttl", p2, s.ttl, parse_duration);
    if (i2["ttl"] && s.ttl < std::chrono::hours(24))
      error(i2["ttl"], join(p2, "ttl"), "servers must keep keys for at least 24h", "R-6");
    if (auto sc = i2["scope"]) {
      auto const v = scalar(sc, join(p2, "scope"));
      if (v && *v != "principal" && *v != "route")
        error(sc, join(p2, "scope"), "invalid value \"" + *v + "\" (expected principal or route)");
      else if (v)
        s.scope_principal = *v == "principal";
    }
    typed(i2, "mismatch_status", p2, s.mismatch_status, [](std::string_view v) {
      return v == "422"   ? parsed<unsigned>::ok(422)
             : v == "409" ? parsed<unsigned>::ok(409)
                          : parsed<unsigned>::fail("invalid value \"" + std::string(v) + "\" (expected 422 or 409)");
    });
    if (s.mismatch_status != 422 && s.mismatch_status != 409)
      error(i2["mismatch_status"], join(p2, "mismatch_status"), "must be 422 or 409");
  }
  if (auto d = body["dedupe"]; d && expect_map(d, join(ipath, "dedupe"))) {
    auto const p2 = join(ipath, "dedupe");
    check_keys(d, p2, {"header", "ttl"});
    if (d["header"]) {
      typed(d, "header", p2, r.dedupe.header, parse_header_name);
    } else {
      error(d, join(p2, "header"), "required: the field that carries the event id (X-Event-ID, webhook-id)");
    }
    typed(d, "ttl", p2, r.dedupe.ttl, parse_duration);
    if (d["ttl"] && r.dedupe.ttl < std::chrono::hours(24 * 7))
      error(d["ttl"], join(p2, "ttl"), "event consumers must deduplicate over at least 7 days", "R-6");
  }
}

}  // namespace rebound::config
