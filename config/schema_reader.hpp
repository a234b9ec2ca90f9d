#pragma once
/** Internal to config/: the reader of rebound's YAML schema, one method per level. Its parts
    live beside the concept they read: load.cpp (the top level, store, limits),
    policy_keys.cpp (each policy key: its reader and description), load_policy.cpp (the
    readers of a layer's nested keys, how layers resolve), load_dependencies.cpp
    (dependencies, routes, matches), load_inbound.cpp (the inbound listener); TLS and auth
    keys in load_security.cpp. Not a public header. */
#include "config/typed_values.hpp"
#include "config/yaml_reader.hpp"

#include <algorithm>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rebound::config {

/** Walks the YAML tree. Each `read_*` function owns one level of the schema, so the full
    schema extends it key by key. */
class reader : public yaml_reader {
 public:
  using yaml_reader::yaml_reader;

  void read_top(const YAML::Node& root, config& c);

  /** Another instance takes a task over once its lease ran out: a lease shorter than an
      attempt would let two instances deliver the same task at once. */
  void check_lease_outlasts_attempts(const YAML::Node& n, const config& c);

  /// `admin.allowed_hosts`: host names (no port, no scheme), lower-cased; `.name` for a domain.
  void read_admin_allowed_hosts(const YAML::Node& n, config& c);

  /// The store's type and, for postgres, where the database is (type-specific keys checked).
  void read_store(const YAML::Node& n, config::store_settings& st);
  // The top level's sections, each by a reader of its own.
  void read_admin(const YAML::Node& root, config& c);
  void read_store_section(const YAML::Node& n, config::store_settings& st);
  void read_async(const YAML::Node& n, config::async_settings& a);
  void read_alert(const YAML::Node& n, config& c);
  void read_tracing(const YAML::Node& n, config::tracing_settings& t);

  void read_inbound(const YAML::Node& n, const std::string& path, inbound_settings& in);
  void read_inbound_route(const YAML::Node& body, const std::string& ipath, inbound_route& r);

  void read_limits(const YAML::Node& n, const std::string& path, request_limits& l);
  void read_dns(const YAML::Node& n, dns_settings& d);

  /** One level of policy as written (the defaults, a dependency, a route): what it sets, and
      where. Its keys are read by policy_keys.cpp's table; `resolve` applies the layers. */
  struct policy_layer {
    YAML::Node node;
    std::string path;
    /// Read apart: it chooses the built-ins the other keys are set over.
    std::optional<context_kind> context;
    /// What the layer sets, key by key (`backoff.base`), in the order read.
    std::vector<std::pair<std::string, std::function<void(policy&)>>> writes;

    template <class T, class Set>
    void write(std::string key, T value, Set set) {
      writes.emplace_back(std::move(key), [value = std::move(value), set](policy& p) { set(p, value); });
    }
    /// Whether the layer sets `key`, or a key under it (`backoff` for `backoff.base`).
    bool wrote(std::string_view key) const {
      return std::any_of(writes.begin(), writes.end(), [key](const auto& w) {
        std::string_view const k = w.first;
        return k == key || (k.size() > key.size() && k.starts_with(key) && k[key.size()] == '.');
      });
    }
    /// Sets on `p` what this layer sets.
    void apply(policy& p) const {
      for (auto const& w : writes) w.second(p);
    }
  };

  /// Every key a policy layer may hold (policy_keys.cpp's table).
  static std::vector<std::string_view> policy_keys();
  /// Those tracked per dependency, which a route may not set.
  static std::vector<std::string_view> per_dependency_keys();

  template <class T, class Parse>
  void optional_typed(const YAML::Node& parent, std::string_view key, const std::string& path, std::optional<T>& out,
                      Parse parse) {
    if (!parent[std::string(key)]) return;
    T v{};
    auto const before = diags_.size();
    typed(parent, key, path, v, parse);
    if (diags_.size() == before) out = v;
  }

  static policy_layer empty_layer(const YAML::Node& at) {
    policy_layer l;
    l.node = at;
    return l;
  }

  /// Reads the policy keys of `n` (the caller has checked the keys): policy_keys.cpp.
  policy_layer read_policy_layer(const YAML::Node& n, const std::string& path);
  // One reader per concept of a policy layer (`path` is the layer's), called with its key's node.
  void read_backoff(const YAML::Node& b, const std::string& path, policy_layer& l);
  void read_schedule(const YAML::Node& sch, const std::string& path, policy_layer& l);
  void read_idempotency(const YAML::Node& i, const std::string& path, policy_layer& l);
  void read_budget(const YAML::Node& b, const std::string& path, policy_layer& l);
  void read_circuit_breaker(const YAML::Node& cb, const std::string& path, policy_layer& l);
  void read_upgrades(const YAML::Node& u, const std::string& path, policy_layer& l);
  void read_retry_on(const YAML::Node& r, const std::string& path, policy_layer& l);

  /** `hedge: {after: 50ms | p95, max: 1}`, or `hedge: off` to turn off one a wider layer set.
      `after` is required: there is no delay that suits every dependency. */
  void read_hedge(const YAML::Node& h, const std::string& hpath, policy_layer& l);

  /** `concurrency: {mode: adaptive}` / `{mode: fixed, limit: 50}` / `off`: the whole map is
      one layer's (a dependency's over the defaults'), since its numbers belong together. */
  void read_concurrency(const YAML::Node& c, const std::string& cpath, policy_layer& l);
  /** `outlier_detection: {consecutive_failures: 5, base_ejection: 30s, max_ejection: 5m,
      max_ejected_share: 0.5}` or `off`: one layer's whole, as concurrency is. */
  void read_outlier_detection(const YAML::Node& o, const std::string& opath, policy_layer& l);
  /// A fixed limit written on `l` below the worker count lets more through than it says.
  void check_concurrency_share(const policy_layer& l, unsigned workers);

  /** Route over dependency over defaults over the context's built-ins, then the checks of
      SPEC 2.1 that concern one resolved policy. Each finding points at the layer that set
      the value, or at the most specific layer when the value is built in. */
  policy resolve(std::initializer_list<const policy_layer*> specific_first);

  void read_dependencies(const YAML::Node& n, const std::string& path, config& c, const policy_layer& defaults);

  void read_routes(const YAML::Node& n, const std::string& path, dependency& d, const policy_layer& dep,
                   const policy_layer& defaults);

  /** a hedge has two copies of the request in flight at once. Only a method that is
      idempotent by itself survives that; an idempotency key does not help, since a server
      that keeps keys answers a concurrent duplicate with 409 (draft-ietf-httpapi-idempotency-key).
      A hedge written on the route is refused; one inherited from the dependency or the
      defaults is reported, as it is applied to the route's idempotent methods only. */
  void check_hedged_methods(const YAML::Node& body, const std::string& rpath, const route& r, bool written_here);

  void read_match(const YAML::Node& m, const std::string& path, route& r);
};

}  // namespace rebound::config
