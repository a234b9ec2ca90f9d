#include "config/load.hpp"

#include "config/check.hpp"
#include "config/typed_values.hpp"
#include "config/yaml_reader.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cctype>
#include <fstream>
#include <sstream>

namespace rebound::config {

std::string to_string(const diagnostic& d) {
  std::string out = d.file;
  if (d.line > 0) out += ":" + std::to_string(d.line) + ":" + std::to_string(d.column);
  out += ": ";
  if (d.warning) out += "warning: ";
  if (!d.path.empty()) out += d.path + ": ";
  out += d.message;
  if (!d.rule.empty()) out += " (" + d.rule + ")";
  return out;
}

namespace {

std::string join_messages(const std::vector<diagnostic>& ds) {
  std::string s;
  for (auto const& d : ds) s += to_string(d) + "\n";
  return s;
}

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

/** Walks the YAML tree. Each `read_*` function owns one level of the schema, so the full
    schema extends it key by key. */
class reader : public yaml_reader {
 public:
  using yaml_reader::yaml_reader;

  void read_top(const YAML::Node& root, config& c) {
    if (!root || root.IsNull()) return;  // an empty file means the built-in defaults
    if (!expect_map(root, "")) return;
    check_keys(root, "",
               {"service", "log_level", "listen", "admin", "workers", "drain_timeout", "watch_config", "unknown_hosts",
                "limits", "defaults", "dependencies", "store", "async", "alert", "inbound"});
    typed(root, "service", "", c.service, parse_service);
    typed(root, "log_level", "", c.log_level, parse_log_level);
    typed(root, "listen", "", c.listen, parse_endpoint);
    if (auto a = root["admin"]; a && a.IsMap()) {
      check_keys(a, "admin", {"listen", "token_file"});
      typed(a, "listen", "admin", c.admin, parse_endpoint);
      if (auto f = readable_file(a, "token_file", "admin")) c.admin_token_file = *f;
    } else {
      typed(root, "admin", "", c.admin, parse_endpoint);
    }
    typed(root, "workers", "", c.workers, parse_workers);
    typed(root, "drain_timeout", "", c.drain_timeout, parse_duration);
    typed(root, "watch_config", "", c.watch_config, parse_bool);
    typed(root, "unknown_hosts", "", c.unknown_hosts, parse_unknown_hosts);
    if (auto n = root["limits"]) read_limits(n, "limits", c.limits);
    if (auto n = root["store"]; n && expect_map(n, "store")) {
      check_keys(n, "store", {"type", "path", "dsn", "password_file", "pool", "lease", "retention", "max_size"});
      read_store(n, c.store);
      typed(n, "max_size", "store", c.store.max_size, parse_size);
      if (n["max_size"] && c.store.max_size != 0 && c.store.max_size < (std::uint64_t{1} << 20))
        error(n["max_size"], "store.max_size", "must be 0 (no bound) or at least 1MiB");
      typed(n, "retention", "store", c.store.retention, parse_duration);
      if (n["retention"] &&
          (c.store.retention < std::chrono::minutes(1) || c.store.retention > std::chrono::hours(24 * 365)))
        error(n["retention"], "store.retention", "must be between 1m and 365d");
      c.store.configured = true;
      typed(n, "path", "store", c.store.path, [](std::string_view s) {
        return s.empty() ? parsed<std::string>::fail("must be a file path") : parsed<std::string>::ok(std::string(s));
      });
    }
    if (auto n = root["async"]; n && expect_map(n, "async")) {
      check_keys(n, "async", {"max_body"});
      typed(n, "max_body", "async", c.async.max_body, parse_size);
      if (c.async.max_body == 0 || c.async.max_body > (64u << 20))
        error(n["max_body"], "async.max_body", "must be between 1B and 64MiB");
    }
    if (auto n = root["alert"]; n && expect_map(n, "alert")) {
      check_keys(n, "alert", {"webhook"});
      typed(n, "webhook", "alert", c.alert_webhook, [](std::string_view s) {
        auto const rest = s.starts_with("http://") ? s.substr(7) : std::string_view();
        if (rest.empty() || rest.front() == '/' || s.find_first_of(" \t\r\n") != std::string_view::npos)
          return parsed<std::string>::fail(
              "must be an absolute http:// URL (for TLS, name a dependency whose origin is https://)");
        return parsed<std::string>::ok(std::string(s));
      });
    }
    if (auto n = root["inbound"]) read_inbound(n, "inbound", c.inbound);
    // Constructed in one go: assigning to a bound YAML::Node rewrites the node it refers to.
    auto const defaults_node = root["defaults"];
    bool const has_defaults = defaults_node && expect_map(defaults_node, "defaults");
    if (has_defaults) check_keys_list(defaults_node, "defaults", policy_keys());
    policy_layer const defaults = has_defaults ? read_policy_layer(defaults_node, "defaults") : empty_layer(root);
    c.defaults = resolve({&defaults});
    if (auto n = root["dependencies"]) read_dependencies(n, "dependencies", c, defaults);
    if (c.store.type == config::store_settings::kind::postgres) check_lease_outlasts_attempts(root["store"], c);
    // Writes on the admin API exist only where calls are handed over (cancel, replay).
    if (root["admin"] && c.hands_over() && c.admin_token_file.empty() && c.admin.host != "127.0.0.1" &&
        c.admin.host != "::1" && c.admin.host != "localhost")
      warn(root["admin"], "admin",
           "the admin API listens beyond loopback without admin.token_file: anyone who reaches it can cancel "
           "and replay handed-over calls",
           "");
  }

  /** Another instance takes a task over once its lease ran out: a lease shorter than an
      attempt would let two instances deliver the same task at once. */
  void check_lease_outlasts_attempts(const YAML::Node& n, const config& c) {
    duration longest = c.defaults.attempt_timeout;
    for (auto const& d : c.dependencies) {
      longest = std::max(longest, d.effective.attempt_timeout);
      for (auto const& r : d.routes) longest = std::max(longest, r.effective.attempt_timeout);
    }
    auto const margin = std::chrono::seconds(5);
    if (c.store.lease < longest + margin)
      error(n["lease"] ? n["lease"] : n, "store.lease",
            "must outlast the longest attempt_timeout (" + format_duration(longest) +
                ") by 5s: a lease that runs out mid-attempt lets another instance deliver the task too");
  }

  /// The store's type and, for postgres, where the database is (type-specific keys checked).
  void read_store(const YAML::Node& n, config::store_settings& st) {
    using kind = config::store_settings::kind;
    typed(n, "type", "store", st.type, [](std::string_view s) {
      if (s == "sqlite") return parsed<kind>::ok(kind::sqlite);
      if (s == "postgres") return parsed<kind>::ok(kind::postgres);
      return parsed<kind>::fail("must be sqlite or postgres");
    });
    bool const pg = st.type == kind::postgres;
    for (auto const* key : {"dsn", "password_file", "pool", "lease"})
      if (n[key] && !pg) error(n[key], join("store", key), "applies to type: postgres only");
    if (pg && n["path"]) error(n["path"], "store.path", "applies to type: sqlite only");
    if (!pg) return;
    if (!n["dsn"]) error(n, "store.dsn", "required for type: postgres (\"host=db.internal dbname=rebound user=rebound\")");
    if (auto d = n["dsn"])
      if (auto v = scalar(d, "store.dsn")) {
        auto const problem = postgres_dsn_problem(*v);
        if (problem.message.empty())
          st.dsn = *v;
        else
          error(d, "store.dsn", problem.message, problem.rule);
      }
    if (auto f = readable_file(n, "password_file", "store")) st.password_file = *f;
    typed(n, "pool", "store", st.pool, [](std::string_view s) {
      unsigned v = 0;
      auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
      return ec == std::errc{} && end == s.data() + s.size() && v >= 1 && v <= 64
                 ? parsed<unsigned>::ok(v)
                 : parsed<unsigned>::fail("must be a whole number from 1 to 64");
    });
    typed(n, "lease", "store", st.lease, parse_duration);
    if (n["lease"] && (st.lease < std::chrono::seconds(1) || st.lease > std::chrono::hours(24)))
      error(n["lease"], "store.lease", "must be between 1s and 24h");
  }

  void read_inbound(const YAML::Node& n, const std::string& path, inbound_settings& in) {
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
    // One layer retries (R-2): the caller retries, rebound passes each request to the app once.
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
          return v == "422" ? parsed<unsigned>::ok(422)
                 : v == "409"
                     ? parsed<unsigned>::ok(409)
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
      if (!r.idempotency.enabled && r.dedupe.header.empty())
        error(body, ipath, "a route needs `idempotency` or `dedupe`");
      in.routes.push_back(std::move(r));
    }
  }

  void read_limits(const YAML::Node& n, const std::string& path, request_limits& l) {
    if (!expect_map(n, path)) return;
    check_keys(n, path,
               {"max_request_head", "max_request_body", "idle_timeout", "max_connections", "head_timeout",
                "body_timeout", "min_body_rate", "max_unknown_hosts", "retry_buffer", "http2_connection_buffer"});
    std::uint64_t head = l.max_request_head;
    typed(n, "max_request_head", path, head, parse_size);
    if (head < 1024 || head > (1u << 20))
      error(n["max_request_head"], join(path, "max_request_head"), "must be between 1KiB and 1MiB");
    else
      l.max_request_head = static_cast<std::size_t>(head);
    typed(n, "max_request_body", path, l.max_request_body, parse_size);
    typed(n, "idle_timeout", path, l.idle_timeout, parse_duration);
    if (l.idle_timeout.count() == 0) error(n["idle_timeout"], join(path, "idle_timeout"), "must be greater than 0");
    unsigned conns = static_cast<unsigned>(l.max_connections);
    typed(n, "max_connections", path, conns, parse_count);
    if (conns < 1 || conns > 1'000'000)
      error(n["max_connections"], join(path, "max_connections"), "must be between 1 and 1000000");
    else
      l.max_connections = static_cast<std::size_t>(conns);
    unsigned unknown = static_cast<unsigned>(l.max_unknown_hosts);
    typed(n, "max_unknown_hosts", path, unknown, parse_count);
    if (unknown > 100'000)
      error(n["max_unknown_hosts"], join(path, "max_unknown_hosts"), "must be between 0 and 100000");
    else
      l.max_unknown_hosts = unknown;
    typed(n, "head_timeout", path, l.head_timeout, parse_duration);
    if (l.head_timeout.count() == 0) error(n["head_timeout"], join(path, "head_timeout"), "must be greater than 0");
    typed(n, "body_timeout", path, l.body_timeout, parse_duration);
    if (l.body_timeout.count() == 0) error(n["body_timeout"], join(path, "body_timeout"), "must be greater than 0");
    typed(n, "min_body_rate", path, l.min_body_rate, parse_size);
    typed(n, "retry_buffer", path, l.retry_buffer, parse_size);
    typed(n, "http2_connection_buffer", path, l.http2_connection_buffer, parse_size);
    if (l.http2_connection_buffer < (64u << 10) || l.http2_connection_buffer > (1u << 30))
      error(n["http2_connection_buffer"], join(path, "http2_connection_buffer"), "must be between 64KiB and 1GiB");
    if (l.min_body_rate == 0)
      error(n["min_body_rate"], join(path, "min_body_rate"), "must be greater than 0 (bytes per second)");
  }

  /// One level of policy as written (defaults or a dependency): what it sets, and where.
  struct policy_layer {
    YAML::Node node;
    std::string path;
    std::optional<context_kind> context;
    std::optional<unsigned> max_retries;
    std::optional<duration> base, cap, total_timeout, attempt_timeout;
    std::optional<jitter_kind> jitter;
    std::optional<std::vector<duration>> schedule;
    std::optional<retry::retry_on> retry_on;
    std::optional<std::uint64_t> max_retry_body;
    std::optional<std::string> idempotency_header, approval;
    std::optional<bool> inject, dead_letter, grpc_streaming, retry_layered;
    std::optional<double> budget_ratio, cb_failure_ratio;
    std::optional<duration> budget_window, cb_window, cb_open_for;
    std::optional<unsigned> budget_min_retries, cb_min_requests, cb_probes;
    std::optional<breaker_mode> cb_mode;
    std::optional<bool> cb_open_on_budget;
    std::optional<hedge_policy> hedge;
  };

  static std::vector<std::string_view> policy_keys() {
    return {"context",        "max_retries", "backoff",  "schedule", "total_timeout",   "attempt_timeout", "retry_on",
            "max_retry_body", "idempotency", "approval", "budget",   "circuit_breaker", "dead_letter",
            "grpc_streaming", "retry_layered",   "hedge"};
  }

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

  /// Reads the policy keys of `n` (the caller has checked the keys).
  policy_layer read_policy_layer(const YAML::Node& n, const std::string& path) {
    policy_layer l;
    l.node = n;
    l.path = path;
    optional_typed(n, "context", path, l.context, parse_context);
    optional_typed(n, "max_retries", path, l.max_retries, parse_max_retries);
    optional_typed(n, "total_timeout", path, l.total_timeout, parse_duration);
    optional_typed(n, "attempt_timeout", path, l.attempt_timeout, parse_duration);
    optional_typed(n, "max_retry_body", path, l.max_retry_body, parse_size);
    optional_typed(n, "retry_layered", path, l.retry_layered, parse_bool);
    // `off` as the issue and SPEC write it, or a plain boolean.
    optional_typed(n, "dead_letter", path, l.dead_letter, [](std::string_view v) {
      if (v == "on") return parsed<bool>::ok(true);
      if (v == "off") return parsed<bool>::ok(false);
      auto b = parse_bool(v);
      if (!b.value) b.error = "invalid value \"" + std::string(v) + "\" (expected on or off)";
      return b;
    });
    optional_typed(n, "grpc_streaming", path, l.grpc_streaming, parse_bool);
    if (auto a = n["approval"]) {
      if (auto v = scalar(a, join(path, "approval"))) l.approval = *v;
    }
    if (auto b = n["backoff"]) {
      auto const bpath = join(path, "backoff");
      if (expect_map(b, bpath)) {
        check_keys(b, bpath, {"base", "cap", "jitter"});
        optional_typed(b, "base", bpath, l.base, parse_duration);
        optional_typed(b, "cap", bpath, l.cap, parse_duration);
        optional_typed(b, "jitter", bpath, l.jitter, parse_jitter);
        if (b["jitter"] && !l.jitter) diags_.back().rule = "R-1";
      }
    }
    if (auto sch = n["schedule"]) {
      auto const spath = join(path, "schedule");
      if (!sch.IsSequence() || sch.size() == 0 || sch.size() > 32) {
        error(sch, spath, "must be a list of 1 to 32 durations, e.g. [1s, 5s, 30s, 2m]");
      } else {
        std::vector<duration> steps;
        auto const before = diags_.size();
        for (std::size_t i = 0; i < sch.size(); ++i) {
          auto const step_path = spath + "[" + std::to_string(i) + "]";
          auto const v = scalar(sch[i], step_path);
          if (!v) continue;
          auto const d = parse_duration(*v);
          if (!d.value)
            error(sch[i], step_path, d.error);
          else
            steps.push_back(*d.value);
        }
        if (diags_.size() == before) l.schedule = std::move(steps);
      }
    }
    if (auto i = n["idempotency"]) {
      auto const ipath = join(path, "idempotency");
      if (expect_map(i, ipath)) {
        check_keys(i, ipath, {"header", "inject"});
        typed(i, "header", ipath, l.idempotency_header, parse_header_name);
        optional_typed(i, "inject", ipath, l.inject, parse_bool);
      }
    }
    if (auto b = n["budget"]) {
      auto const bpath = join(path, "budget");
      if (b.IsScalar() && (b.Scalar() == "off" || b.Scalar() == "false" || b.Scalar() == "none")) {
        error(b, bpath, "the retry budget may not be disabled: without it, retries multiply an outage", "R-7");
      } else if (expect_map(b, bpath)) {
        check_keys(b, bpath, {"ratio", "window", "min_retries"});
        optional_typed(b, "ratio", bpath, l.budget_ratio, parse_ratio);
        if (l.budget_ratio && (*l.budget_ratio == 0 || *l.budget_ratio > 0.2)) {
          error(b["ratio"], join(bpath, "ratio"),
                *l.budget_ratio == 0
                    ? "ratio 0 disables the retry budget (expected more than 0, at most 0.2)"
                    : "ratio " + b["ratio"].Scalar() + " is above 0.2: retries may be at most 20% of requests",
                "R-7");
          l.budget_ratio.reset();
        }
        optional_typed(b, "window", bpath, l.budget_window, parse_duration);
        optional_typed(b, "min_retries", bpath, l.budget_min_retries, parse_count);
      }
    }
    if (auto cb = n["circuit_breaker"]) {
      auto const cpath = join(path, "circuit_breaker");
      if (expect_map(cb, cpath)) {
        check_keys(cb, cpath,
                   {"mode", "failure_ratio", "min_requests", "window", "open_on_budget_exhausted", "open_for",
                    "half_open_probes"});
        optional_typed(cb, "mode", cpath, l.cb_mode, parse_breaker_mode);
        optional_typed(cb, "failure_ratio", cpath, l.cb_failure_ratio, parse_ratio);
        if (l.cb_failure_ratio && *l.cb_failure_ratio == 0) {
          error(cb["failure_ratio"], join(cpath, "failure_ratio"), "must be greater than 0");
          l.cb_failure_ratio.reset();
        }
        optional_typed(cb, "min_requests", cpath, l.cb_min_requests, parse_count);
        optional_typed(cb, "window", cpath, l.cb_window, parse_duration);
        optional_typed(cb, "open_on_budget_exhausted", cpath, l.cb_open_on_budget, parse_bool);
        optional_typed(cb, "open_for", cpath, l.cb_open_for, parse_duration);
        optional_typed(cb, "half_open_probes", cpath, l.cb_probes, parse_count);
        for (auto key : {"min_requests", "half_open_probes"}) {
          auto const& v = std::string_view(key) == "min_requests" ? l.cb_min_requests : l.cb_probes;
          if (v && *v == 0) error(cb[key], join(cpath, key), "must be at least 1");
        }
        for (auto key : {"window", "open_for"}) {
          auto const& v = std::string_view(key) == "window" ? l.cb_window : l.cb_open_for;
          if (v && v->count() == 0) error(cb[key], join(cpath, key), "must be greater than 0");
        }
      }
    }
    if (auto h = n["hedge"]) read_hedge(h, join(path, "hedge"), l.hedge);
    if (auto r = n["retry_on"]) {
      auto const rpath = join(path, "retry_on");
      if (r.IsScalar() && r.Scalar() == "default") {
        l.retry_on = retry::retry_on::r4_default();
      } else if (r.IsSequence()) {
        retry::retry_on set = retry::retry_on::none();
        bool ok = true;
        for (std::size_t k = 0; k < r.size(); ++k) {
          auto const epath = rpath + "[" + std::to_string(k) + "]";
          auto const v = scalar(r[k], epath);
          if (!v) {
            ok = false;
            continue;
          }
          auto const c = retry::retry_on::parse(*v);
          if (!c.value) {
            error(r[k], epath, c.error, "R-4");
            ok = false;
            continue;
          }
          set.add(*c.value);
        }
        if (ok) l.retry_on = set;
      } else {
        error(r, rpath, "expected `default` or a list of retry classes");
      }
    }
    return l;
  }

  /** `hedge: {after: 50ms | p95, max: 1}`, or `hedge: off` to turn off one a wider layer set.
      `after` is required: there is no delay that suits every dependency. */
  void read_hedge(const YAML::Node& h, const std::string& hpath, std::optional<hedge_policy>& out) {
    if (h.IsScalar() && (h.Scalar() == "off" || h.Scalar() == "false")) {
      out = hedge_policy{};
      return;
    }
    if (!h.IsMap()) {
      error(h, hpath, "expected `off` or a map like {after: 50ms, max: 1} (after: a duration or p95)");
      return;
    }
    check_keys(h, hpath, {"after", "max"});
    hedge_policy hp;
    hp.max = 1;
    auto const before = diags_.size();
    if (auto a = h["after"]) {
      auto const apath = join(hpath, "after");
      if (auto v = scalar(a, apath)) {
        if (*v == "p95") {
          hp.after_p95 = true;
        } else if (auto d = parse_duration(*v); !d.value) {
          error(a, apath, "invalid value \"" + *v + "\" (expected p95 or a duration such as 50ms)");
        } else if (d.value->count() == 0) {
          error(a, apath, "must be greater than 0 (a hedge at once doubles every request)");
        } else {
          hp.after = *d.value;
        }
      }
    } else {
      error(h, join(hpath, "after"), "is required: p95 (the dependency's observed latency) or a duration such as 50ms");
    }
    if (h["max"]) {
      unsigned v = 0;
      typed(h, "max", hpath, v, [](std::string_view s) {
        unsigned x = 0;
        auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), x);
        if (ec != std::errc{} || end != s.data() + s.size() || x < 1 || x > 3)
          return parsed<unsigned>::fail("invalid max \"" + std::string(s) +
                                        "\" (expected 1 to 3 hedges; `hedge: off` turns hedging off)");
        return parsed<unsigned>::ok(x);
      });
      hp.max = v;
    }
    if (diags_.size() == before) out = hp;
  }

  /** Route over dependency over defaults over the context's built-ins, then the checks of
      SPEC 2.1 that concern one resolved policy. Each finding points at the layer that set
      the value, or at the most specific layer when the value is built in. */
  policy resolve(std::initializer_list<const policy_layer*> specific_first) {
    policy p;
    auto pick = [&](auto member) {
      for (auto const* l : specific_first)
        if ((l->*member)) return l;
      return static_cast<const policy_layer*>(nullptr);
    };
    auto const* most_specific = *specific_first.begin();
    auto where = [&](auto member) {
      auto const* l = pick(member);
      return l ? l : most_specific;
    };
    if (auto const* l = pick(&policy_layer::context)) p.context = *l->context;
    p.max_retries = builtin_max_retries(p.context);
    p.total_timeout = builtin_total_timeout(p.context);
    if (auto const* l = pick(&policy_layer::max_retries)) p.max_retries = *l->max_retries;
    if (auto const* l = pick(&policy_layer::total_timeout)) p.total_timeout = *l->total_timeout;
    if (auto const* l = pick(&policy_layer::attempt_timeout)) p.attempt_timeout = *l->attempt_timeout;
    if (auto const* l = pick(&policy_layer::base)) p.backoff.base = *l->base;
    if (auto const* l = pick(&policy_layer::cap)) p.backoff.cap = *l->cap;
    if (auto const* l = pick(&policy_layer::jitter)) p.backoff.jitter = *l->jitter;
    // A written schedule wins; else a written backoff; else the context's built-in (R-3's
    // table for webhook).
    bool const backoff_written = pick(&policy_layer::base) || pick(&policy_layer::cap) || pick(&policy_layer::jitter);
    if (auto const* l = pick(&policy_layer::schedule))
      p.schedule = *l->schedule;
    else if (!backoff_written)
      p.schedule = builtin_schedule(p.context);
    if (auto const* l = pick(&policy_layer::retry_on)) p.retry_on = *l->retry_on;
    if (auto const* l = pick(&policy_layer::max_retry_body)) p.max_retry_body = *l->max_retry_body;
    if (auto const* l = pick(&policy_layer::idempotency_header)) p.idempotency.header = *l->idempotency_header;
    if (auto const* l = pick(&policy_layer::inject)) p.idempotency.inject = *l->inject;
    if (auto const* l = pick(&policy_layer::approval)) p.approval = *l->approval;
    if (auto const* l = pick(&policy_layer::dead_letter)) p.dead_letter = *l->dead_letter;
    if (auto const* l = pick(&policy_layer::grpc_streaming)) p.grpc_streaming = *l->grpc_streaming;
    if (auto const* l = pick(&policy_layer::retry_layered)) p.retry_layered = *l->retry_layered;
    if (auto const* l = pick(&policy_layer::hedge)) p.hedge = *l->hedge;
    if (auto const* l = pick(&policy_layer::budget_ratio)) p.budget.ratio = *l->budget_ratio;
    if (auto const* l = pick(&policy_layer::budget_window)) p.budget.window = *l->budget_window;
    if (auto const* l = pick(&policy_layer::budget_min_retries)) p.budget.min_retries = *l->budget_min_retries;
    if (auto const* l = pick(&policy_layer::cb_mode)) p.circuit_breaker.mode = *l->cb_mode;
    if (auto const* l = pick(&policy_layer::cb_failure_ratio)) p.circuit_breaker.failure_ratio = *l->cb_failure_ratio;
    if (auto const* l = pick(&policy_layer::cb_min_requests)) p.circuit_breaker.min_requests = *l->cb_min_requests;
    if (auto const* l = pick(&policy_layer::cb_window)) p.circuit_breaker.window = *l->cb_window;
    if (auto const* l = pick(&policy_layer::cb_open_on_budget))
      p.circuit_breaker.open_on_budget_exhausted = *l->cb_open_on_budget;
    if (auto const* l = pick(&policy_layer::cb_open_for)) p.circuit_breaker.open_for = *l->cb_open_for;
    if (auto const* l = pick(&policy_layer::cb_probes)) p.circuit_breaker.half_open_probes = *l->cb_probes;
    // Where each finding of the enforcement table (check.cpp) points: the most specific
    // layer that set the key, else the most specific layer.
    auto locate = [&](std::string_view key) -> std::pair<YAML::Node, std::string> {
      auto near = [&](const policy_layer* l, std::string_view node_key) {
        auto n = l->node[std::string(node_key)];
        return std::make_pair(n ? n : l->node, join(l->path, key));
      };
      if (key == "budget.window") return near(where(&policy_layer::budget_window), "budget");
      if (key == "idempotency.inject") return near(where(&policy_layer::inject), "idempotency");
      if (key == "total_timeout") return near(where(&policy_layer::total_timeout), "total_timeout");
      if (key == "attempt_timeout") return near(where(&policy_layer::attempt_timeout), "attempt_timeout");
      if (key == "backoff") return near(where(&policy_layer::base), "backoff");
      if (key == "schedule") return near(where(&policy_layer::schedule), "schedule");
      if (key == "dead_letter") return near(where(&policy_layer::dead_letter), "dead_letter");
      if (key == "hedge") return near(where(&policy_layer::hedge), "hedge");
      return near(where(&policy_layer::max_retries), "max_retries");
    };
    for (auto const& f : check_policy(p)) {
      auto [n, kp] = locate(f.key);
      if (f.warning)
        warn(n, kp, f.message, f.rule);
      else
        error(n, kp, f.message, f.rule);
    }
    return p;
  }

  void read_dependencies(const YAML::Node& n, const std::string& path, config& c, const policy_layer& defaults) {
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
          error(tls, join(dpath, "tls"),
                "tls applies to an https:// origin; set origin: https://... on the dependency");
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

  void read_routes(const YAML::Node& n, const std::string& path, dependency& d, const policy_layer& dep,
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
      // R-7 tracks budgets and breakers per dependency: a route cannot have its own.
      for (auto const* key : {"budget", "circuit_breaker"})
        if (body[key])
          error(body[key], join(rpath, key),
                std::string(key) + " is tracked per dependency, not per route: set it on the dependency", "R-7");
      route r;
      if (auto m = body["match"]) read_match(m, join(rpath, "match"), r);
      auto const layer = read_policy_layer(body, rpath);
      r.effective = resolve({&layer, &dep, &defaults});
      r.effective.budget = d.effective.budget;
      r.effective.circuit_breaker = d.effective.circuit_breaker;
      check_hedged_methods(body, rpath, r, layer.hedge.has_value());
      d.routes.push_back(std::move(r));
    }
  }

  /** R-6: a hedge has two copies of the request in flight at once. Only a method that is
      idempotent by itself survives that; an idempotency key does not help, since a server
      that keeps keys answers a concurrent duplicate with 409 (draft-ietf-httpapi-idempotency-key).
      A hedge written on the route is refused; one inherited from the dependency or the
      defaults is reported, as it is applied to the route's idempotent methods only. */
  void check_hedged_methods(const YAML::Node& body, const std::string& rpath, const route& r, bool written_here) {
    if (!r.effective.hedge.enabled() || r.methods.empty()) return;
    std::string unsafe;
    for (auto const& m : r.methods)
      if (!hedge_safe_method(m)) unsafe += (unsafe.empty() ? "" : ", ") + m;
    if (unsafe.empty()) return;
    auto const why = " is not idempotent: a hedge puts a second copy in flight while the first may still run, and "
                     "an idempotency key does not make that safe (a concurrent duplicate gets 409); only GET, HEAD, "
                     "OPTIONS, PUT and DELETE are hedged";
    if (written_here)
      error(body["hedge"], join(rpath, "hedge"), "this route's methods include " + unsafe + ", which" + why, "R-6");
    else
      warn(body["match"] ? body["match"] : body, join(rpath, "hedge"),
           "the hedge this route inherits does not apply to " + unsafe + ", which" + why, "R-6");
  }

  void read_match(const YAML::Node& m, const std::string& path, route& r) {
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
          error(ms[k], epath,
                "methods are case-sensitive: \"" + *v + "\" would match no standard method; did you mean \"" + up +
                    "\"?");
          continue;
        }
        r.methods.push_back(*v);
      }
    }
  }

  static parsed<context_kind> parse_context(std::string_view s) {
    if (s == "sync") return parsed<context_kind>::ok(context_kind::sync);
    if (s == "async") return parsed<context_kind>::ok(context_kind::async);
    if (s == "webhook") return parsed<context_kind>::ok(context_kind::webhook);
    if (s == "batch") return parsed<context_kind>::ok(context_kind::batch);
    if (s == "grpc") return parsed<context_kind>::ok(context_kind::grpc);
    return parsed<context_kind>::fail("invalid context \"" + std::string(s) +
                                      "\" (expected sync, async, webhook, batch or grpc)");
  }

  static parsed<jitter_kind> parse_jitter(std::string_view s) {
    if (s == "full") return parsed<jitter_kind>::ok(jitter_kind::full);
    if (s == "decorrelated") return parsed<jitter_kind>::ok(jitter_kind::decorrelated);
    if (s == "equal" || s == "none")
      return parsed<jitter_kind>::fail("jitter \"" + std::string(s) +
                                       "\" is not allowed: equal jitter and fixed intervals make clients retry in step "
                                       "(expected full or decorrelated)");
    return parsed<jitter_kind>::fail("invalid jitter \"" + std::string(s) + "\" (expected full or decorrelated)");
  }

  static parsed<unsigned> parse_max_retries(std::string_view s) {
    unsigned v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc{} || end != s.data() + s.size() || v > 100)
      return parsed<unsigned>::fail("invalid max_retries \"" + std::string(s) + "\" (expected a whole number)");
    return parsed<unsigned>::ok(v);
  }

  /// A plain decimal between 0 and 1 (`0.2`, `1`).
  static parsed<double> parse_ratio(std::string_view s) {
    double v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v, std::chars_format::fixed);
    if (ec != std::errc{} || end != s.data() + s.size() || !(v >= 0 && v <= 1))
      return parsed<double>::fail("invalid ratio \"" + std::string(s) + "\" (expected a number from 0 to 1, e.g. 0.2)");
    return parsed<double>::ok(v);
  }

  static parsed<unsigned> parse_count(std::string_view s) {
    unsigned v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc{} || end != s.data() + s.size() || v > 1000000)
      return parsed<unsigned>::fail("invalid count \"" + std::string(s) + "\" (expected a whole number up to 1000000)");
    return parsed<unsigned>::ok(v);
  }

  static parsed<breaker_mode> parse_breaker_mode(std::string_view s) {
    if (s == "enforce") return parsed<breaker_mode>::ok(breaker_mode::enforce);
    if (s == "signal") return parsed<breaker_mode>::ok(breaker_mode::signal);
    if (s == "off") return parsed<breaker_mode>::ok(breaker_mode::off);
    return parsed<breaker_mode>::fail("invalid mode \"" + std::string(s) + "\" (expected enforce, signal or off)");
  }

  static parsed<unsigned> parse_workers(std::string_view s) {
    unsigned v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc{} || end != s.data() + s.size() || v > 256)
      return parsed<unsigned>::fail("invalid workers \"" + std::string(s) +
                                    "\" (expected 0 for one per core, or 1 to 256)");
    return parsed<unsigned>::ok(v);
  }

  /// The metrics' `service` label: a name, not free text, so dashboards can select on it.
  static parsed<std::string> parse_service(std::string_view s) {
    bool const ok = !s.empty() && s.size() <= 128 && std::all_of(s.begin(), s.end(), [](char ch) {
      return std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' || ch == '.';
    });
    if (ok) return parsed<std::string>::ok(std::string(s));
    return parsed<std::string>::fail("invalid value \"" + std::string(s) +
                                     "\" (expected 1..128 letters, digits, '-', '_' or '.')");
  }

  static parsed<std::string> parse_log_level(std::string_view s) {
    for (auto const* l : {"trace", "debug", "info", "warn", "error", "off"})
      if (s == l) return parsed<std::string>::ok(std::string(s));
    return parsed<std::string>::fail("invalid value \"" + std::string(s) +
                                     "\" (expected trace, debug, info, warn, error or off)");
  }

  static parsed<unknown_hosts_policy> parse_unknown_hosts(std::string_view s) {
    if (s == "allow") return parsed<unknown_hosts_policy>::ok(unknown_hosts_policy::allow);
    if (s == "deny") return parsed<unknown_hosts_policy>::ok(unknown_hosts_policy::deny);
    return parsed<unknown_hosts_policy>::fail("invalid value \"" + std::string(s) + "\" (expected allow or deny)");
  }
};

config load(const YAML::Node& root, reader& r, std::vector<diagnostic>* warnings) {
  config c = default_config();
  r.read_top(root, c);
  if (!r.diagnostics().empty()) {
    auto all = std::move(r.diagnostics());
    all.insert(all.end(), r.warnings().begin(), r.warnings().end());
    throw config_error(std::move(all));
  }
  if (warnings) *warnings = std::move(r.warnings());
  return c;
}

YAML::Node parse_yaml(std::string_view text, const std::string& name) {
  try {
    return YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    diagnostic d{name,
                 e.mark.line >= 0 ? e.mark.line + 1 : 0,
                 e.mark.column >= 0 ? e.mark.column + 1 : 0,
                 "",
                 "malformed YAML: " + e.msg,
                 ""};
    throw config_error({d}, true);
  }
}

}  // namespace

config_error::config_error(std::vector<diagnostic> diagnostics, bool malformed)
    : std::runtime_error(join_messages(diagnostics)), diagnostics_(std::move(diagnostics)), malformed_(malformed) {}

config load_config_text(std::string_view yaml, const std::string& name, std::vector<diagnostic>* warnings) {
  auto const root = parse_yaml(yaml, name);
  reader r(name);
  return load(root, r, warnings);
}

policy load_policy_text(std::string_view text, const std::string& name) {
  auto spec = parse_yaml(text, name);
  if (!spec.IsMap()) throw config_error({diagnostic{name, 1, 1, "", "a policy is an object of policy keys", ""}});
  if (!spec["context"]) spec["context"] = "async";
  YAML::Node root(YAML::NodeType::Map);
  root["defaults"] = spec;
  reader r(name);
  return load(root, r, nullptr).defaults;
}

config load_config_file(const std::string& path, std::vector<diagnostic>* warnings) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw config_error({diagnostic{path, 0, 0, "", "cannot read the file", ""}}, true);
  std::ostringstream text;
  text << in.rdbuf();
  return load_config_text(text.str(), path, warnings);
}

config default_config() { return config{}; }

bool route::matches(std::string_view method, std::string_view path) const {
  if (!path.starts_with(path_prefix)) return false;
  return methods.empty() || std::find(methods.begin(), methods.end(), method) != methods.end();
}

const policy& dependency::policy_for(std::string_view method, std::string_view path) const {
  for (auto const& r : routes)
    if (r.matches(method, path)) return r.effective;
  return effective;
}

const dependency* config::find_dependency(std::string_view host, std::uint16_t port) const {
  if (host_index.empty()) return nullptr;
  std::string key = lower(host);
  auto const bare = key.size();
  key += ":" + std::to_string(port);
  if (auto it = host_index.find(key); it != host_index.end()) return &dependencies[it->second];
  key.resize(bare);
  if (auto it = host_index.find(key); it != host_index.end()) return &dependencies[it->second];
  return nullptr;
}

}  // namespace rebound::config

namespace rebound::config {

bool inbound_route::keeps_keys_for(std::string_view method) const {
  if (!match.methods.empty())
    return std::find(match.methods.begin(), match.methods.end(), method) != match.methods.end();
  return method == "POST" || method == "PATCH";
}

const inbound_route* inbound_settings::route_for(std::string_view method, std::string_view path) const {
  for (auto const& r : routes)
    if (r.match.matches(method, path)) return &r;
  return nullptr;
}

bool inbound_settings::needs_store() const {
  for (auto const& r : routes)
    if (r.idempotency.enabled || !r.dedupe.header.empty()) return true;
  return false;
}

bool config::hands_over() const {
  if (store.configured || hands_over_calls(defaults.context)) return true;
  for (auto const& d : dependencies) {
    if (hands_over_calls(d.effective.context)) return true;
    for (auto const& r : d.routes)
      if (hands_over_calls(r.effective.context)) return true;
  }
  return false;
}

}  // namespace rebound::config
