// `dependencies:`: each dependency, its routes and what they match.
#include "config/schema_reader.hpp"

#include "config/check.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cctype>

namespace rebound::config {

void reader::read_dependencies(const YAML::Node& n, const std::string& path, config& c, const policy_layer& defaults) {
  if (!expect_map(n, path)) return;
  for (auto const& kv : n) {
    dependency d;
    d.name = kv.first.Scalar();
    auto const dpath = join(path, d.name);
    auto const& body = kv.second;
    if (!expect_map(body, dpath)) continue;
    auto keys = policy_keys();
    keys.push_back("hosts");
    keys.push_back("origin");
    keys.push_back("tls");
    keys.push_back("auth");
    keys.push_back("routes");
    check_keys_list(body, dpath, keys);
    auto const layer = read_policy_layer(body, dpath);
    d.effective = resolve({&layer, &defaults});
    check_concurrency_share(layer, c.workers);
    if (auto routes = body["routes"]) read_routes(routes, join(dpath, "routes"), d, layer, defaults);
    if (body["origin"]) {
      origin_url o;
      auto const before = diags_.size();
      typed(body, "origin", dpath, o, parse_origin);
      if (diags_.size() == before) d.origin = o;
    }
    bool const https = d.origin && d.origin->scheme == "https";
    if (auto tls = body["tls"]) {
      auto t = read_tls(*this, tls, join(dpath, "tls"));  // R-9 is checked whatever the origin
      if (https)
        d.tls = std::move(t);
      else if (!body["origin"] || d.origin)
        error(tls, join(dpath, "tls"), "tls applies to an https:// origin; set origin: https://... on the dependency");
    } else if (https) {
      d.tls = tls_settings{};  // the system store, the origin's host name
    }
    if (auto auth = body["auth"]) d.auth = read_auth(*this, auth, join(dpath, "auth"));
    auto const hosts = body["hosts"];
    if (!hosts || !hosts.IsSequence() || hosts.size() == 0) {
      error(hosts ? hosts : kv.first, join(dpath, "hosts"), "expected a non-empty list of host or host:port values");
      continue;
    }
    for (std::size_t i = 0; i < hosts.size(); ++i) {
      auto const hpath = join(dpath, "hosts") + "[" + std::to_string(i) + "]";
      auto const h = scalar(hosts[i], hpath);
      if (!h) continue;
      if (h->empty() || h->find_first_of(" /?#@") != std::string::npos) {
        error(hosts[i], hpath, "invalid host \"" + *h + "\" (expected host or host:port)");
        continue;
      }
      auto const key = lower(*h);
      if (auto const seen = c.host_index.find(key); seen != c.host_index.end()) {
        // This dependency is not in the list yet: a host it names twice points one past the end.
        auto const& owner = seen->second < c.dependencies.size() ? c.dependencies[seen->second].name : d.name;
        error(hosts[i], hpath, "host \"" + *h + "\" already belongs to dependency \"" + owner + "\"");
        continue;
      }
      c.host_index.emplace(key, c.dependencies.size());
      d.hosts.push_back(*h);
    }
    c.dependencies.push_back(std::move(d));
  }
}

void reader::read_routes(const YAML::Node& n, const std::string& path, dependency& d, const policy_layer& dep,
                         const policy_layer& defaults) {
  if (!n.IsSequence()) {
    error(n, path, "expected a list of routes, each with `match` and the policy keys it overrides");
    return;
  }
  for (std::size_t i = 0; i < n.size(); ++i) {
    auto const rpath = path + "[" + std::to_string(i) + "]";
    auto const body = n[i];
    if (!expect_map(body, rpath)) continue;
    auto keys = policy_keys();
    keys.push_back("match");
    check_keys_list(body, rpath, keys);
    // R-7 tracks budgets and breakers per dependency, and issue 51 the concurrency limit: a
    // route cannot have its own.
    for (auto const key : per_dependency_keys())
      if (auto const n = body[std::string(key)])
        error(n, join(rpath, key),
              std::string(key) + " is tracked per dependency, not per route: set it on the dependency",
              key == "budget" || key == "circuit_breaker" ? "R-7" : "");
    route r;
    if (auto m = body["match"]) read_match(m, join(rpath, "match"), r);
    auto const layer = read_policy_layer(body, rpath);
    r.effective = resolve({&layer, &dep, &defaults});
    r.effective.budget = d.effective.budget;
    r.effective.circuit_breaker = d.effective.circuit_breaker;
    r.effective.concurrency = d.effective.concurrency;
    r.effective.outlier_detection = d.effective.outlier_detection;
    check_hedged_methods(body, rpath, r, layer.wrote("hedge"));
    d.routes.push_back(std::move(r));
  }
}

/** R-6: a hedge has two copies of the request in flight at once. Only a method that is
    idempotent by itself survives that; an idempotency key does not help, since a server
    that keeps keys answers a concurrent duplicate with 409 (draft-ietf-httpapi-idempotency-key).
    A hedge written on the route is refused; one inherited from the dependency or the
    defaults is reported, as it is applied to the route's idempotent methods only. */
void reader::check_hedged_methods(const YAML::Node& body, const std::string& rpath, const route& r, bool written_here) {
  if (!r.effective.hedge.enabled() || r.methods.empty()) return;
  std::string unsafe;
  for (auto const& m : r.methods)
    if (!idempotent_method(m)) unsafe += (unsafe.empty() ? "" : ", ") + m;
  if (unsafe.empty()) return;
  auto const why =
      " is not idempotent: a hedge puts a second copy in flight while the first may still run, and "
      "an idempotency key does not make that safe (a concurrent duplicate gets 409); only GET, HEAD, "
      "OPTIONS, PUT and DELETE are hedged";
  if (written_here)
    error(body["hedge"], join(rpath, "hedge"), "this route's methods include " + unsafe + ", which" + why, "R-6");
  else
    warn(body["match"] ? body["match"] : body, join(rpath, "hedge"),
         "the hedge this route inherits does not apply to " + unsafe + ", which" + why, "R-6");
}

void reader::read_match(const YAML::Node& m, const std::string& path, route& r) {
  if (!expect_map(m, path)) return;
  check_keys(m, path, {"path_prefix", "methods"});
  if (auto p = m["path_prefix"]) {
    auto const ppath = join(path, "path_prefix");
    if (auto v = scalar(p, ppath)) {
      if (v->empty() || v->front() != '/' || v->find_first_of("?# ") != std::string::npos)
        error(p, ppath,
              "invalid path_prefix \"" + *v + "\" (expected a path starting with /, without query or spaces)");
      else
        r.path_prefix = *v;
    }
  }
  if (auto ms = m["methods"]) {
    auto const mpath = join(path, "methods");
    if (!ms.IsSequence() || ms.size() == 0) {
      error(ms, mpath, "expected a non-empty list of methods, e.g. [POST, PATCH]");
      return;
    }
    for (std::size_t k = 0; k < ms.size(); ++k) {
      auto const epath = mpath + "[" + std::to_string(k) + "]";
      auto const v = scalar(ms[k], epath);
      if (!v) continue;
      bool const token = !v->empty() && std::all_of(v->begin(), v->end(), [](char ch) {
        return std::isalnum(static_cast<unsigned char>(ch)) ||
               std::string_view("!#$%&'*+-.^_`|~").find(ch) != std::string_view::npos;
      });
      if (!token) {
        error(ms[k], epath, "invalid method \"" + *v + "\"");
        continue;
      }
      bool const upper =
          std::none_of(v->begin(), v->end(), [](char ch) { return std::islower(static_cast<unsigned char>(ch)); });
      if (!upper) {
        std::string up = *v;
        for (auto& ch : up) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
        error(
            ms[k], epath,
            "methods are case-sensitive: \"" + *v + "\" would match no standard method; did you mean \"" + up + "\"?");
        continue;
      }
      r.methods.push_back(*v);
    }
  }
}

}  // namespace rebound::config
