#include "config/describe.hpp"

#include "config/typed_values.hpp"
#include "proxy/observe/json.hpp"

namespace rebound::config {
namespace {

/** An object of the effective config, open while in scope, written through the one JSON
    writer (observe/json.hpp) with the config's own vocabulary. */
class object_writer {
 public:
  explicit object_writer(observe::json_writer& w) : w_(w) { w_.open_object(); }
  ~object_writer() { w_.close_object(); }
  object_writer(const object_writer&) = delete;
  object_writer& operator=(const object_writer&) = delete;

  void string(std::string_view k, std::string_view v) { w_.field(k, v); }
  void number(std::string_view k, double v) { w_.key(k).number(v); }
  void integer(std::string_view k, std::uint64_t v) { w_.field(k, v); }
  void boolean(std::string_view k, bool v) { w_.field(k, v); }
  void strings(std::string_view k, const auto& list) {
    w_.key(k).open_array();
    for (std::string_view s : list) w_.value(s);
    w_.close_array();
  }
  /// The writer, after the key `k`: the caller writes its value.
  observe::json_writer& nested(std::string_view k) { return w_.key(k); }

 private:
  observe::json_writer& w_;
};

}  // namespace

namespace {

std::string endpoint_text(const endpoint& e) {
  auto const host = e.host.find(':') != std::string::npos ? "[" + e.host + "]" : e.host;
  return host + ":" + std::to_string(e.port);
}

/// Into `w`, the policy's keys as they would stand in the YAML; a route has no budget or
/// breaker of its own (R-7 tracks them per dependency).
void write_policy(object_writer& w, const policy& p, bool with_guards = true) {
  w.string("context", to_string(p.context));
  w.integer("max_retries", p.max_retries);
  {
    object_writer b(w.nested("backoff"));
    b.string("base", format_duration(p.backoff.base));
    b.string("cap", format_duration(p.backoff.cap));
    b.string("jitter", p.backoff.jitter == jitter_kind::full ? "full" : "decorrelated");
  }
  if (!p.schedule.empty()) {
    std::vector<std::string> steps;
    for (auto const s : p.schedule) steps.push_back(format_duration(s));
    w.strings("schedule", steps);
  }
  w.string("total_timeout", format_duration(p.total_timeout));
  w.string("attempt_timeout", format_duration(p.attempt_timeout));
  w.strings("retry_on", p.retry_on.names());
  w.string("max_retry_body", format_size(p.max_retry_body));
  w.boolean("retry_layered", p.retry_layered);
  if (p.hedge.enabled()) {
    object_writer h(w.nested("hedge"));
    h.string("after", p.hedge.after_p95 ? std::string("p95") : format_duration(p.hedge.after));
    h.integer("max", p.hedge.max);
  } else {
    w.string("hedge", "off");
  }
  w.strings("upgrades", p.websocket_upgrades ? std::vector<std::string>{"websocket"} : std::vector<std::string>{});
  {
    object_writer i(w.nested("idempotency"));
    i.string("header", p.idempotency.header);
    i.boolean("inject", p.idempotency.inject);
  }
  if (with_guards) {
    object_writer b(w.nested("budget"));
    b.number("ratio", p.budget.ratio);
    b.string("window", format_duration(p.budget.window));
    b.integer("min_retries", p.budget.min_retries);
  }
  if (with_guards) {
    auto const& cb = p.circuit_breaker;
    object_writer c(w.nested("circuit_breaker"));
    c.string("mode", to_string(cb.mode));
    c.number("failure_ratio", cb.failure_ratio);
    c.integer("min_requests", cb.min_requests);
    c.string("window", format_duration(cb.window));
    c.boolean("open_on_budget_exhausted", cb.open_on_budget_exhausted);
    c.string("open_for", format_duration(cb.open_for));
    c.integer("half_open_probes", cb.half_open_probes);
  }
  if (with_guards) {
    auto const& cc = p.concurrency;
    object_writer c(w.nested("concurrency"));
    c.string("mode", to_string(cc.mode));
    if (cc.mode == concurrency_mode::fixed) c.integer("limit", cc.limit);
    if (cc.mode == concurrency_mode::adaptive) {
      c.integer("min_limit", cc.min_limit);
      c.integer("max_limit", cc.max_limit);
      c.number("tolerance", cc.tolerance);
      c.string("probe_interval", format_duration(cc.probe_interval));
    }
  }
  if (with_guards) {
    auto const& od = p.outlier_detection;
    if (!od.enabled) {
      w.string("outlier_detection", "off");
    } else {
      object_writer o(w.nested("outlier_detection"));
      o.integer("consecutive_failures", od.consecutive_failures);
      o.string("base_ejection", format_duration(od.base_ejection));
      o.string("max_ejection", format_duration(od.max_ejection));
      o.number("max_ejected_share", od.max_ejected_share);
    }
  }
  if (!p.approval.empty()) w.string("approval", p.approval);
  if (!p.dead_letter) w.boolean("dead_letter", false);
  if (p.grpc_streaming) w.boolean("grpc_streaming", true);
}

/// File paths only: the config holds no secret to redact.
void write_tls(object_writer& dep, const tls_settings& t) {
  object_writer o(dep.nested("tls"));
  if (!t.ca_file.empty()) o.string("ca_file", t.ca_file);  // absent: the system store
  if (!t.server_name.empty()) o.string("server_name", t.server_name);
  if (!t.client_cert.empty()) o.string("client_cert", t.client_cert);
  if (!t.client_key.empty()) o.string("client_key", t.client_key);
}

void write_auth(object_writer& dep, const auth_settings& a) {
  object_writer o(dep.nested("auth"));
  if (a.type == auth_settings::kind::oauth2_client_credentials) {
    o.string("type", "oauth2_client_credentials");
    o.string("token_url", format_service_url(a.token_url));
    o.string("client_id", a.client_id);
    o.string("client_secret_file", a.client_secret_file);
    if (!a.scope.empty()) o.string("scope", a.scope);
    if (!a.token_ca_file.empty()) o.string("ca_file", a.token_ca_file);
  } else {
    o.string("type", "bearer_file");
    o.string("path", a.path);
  }
  o.string("refresh_skew", format_duration(a.refresh_skew));
}

}  // namespace

std::string policy_json(const policy& p) {
  std::string out;
  observe::json_writer json(out);
  {
    object_writer w(json);
    write_policy(w, p, false);
  }
  return out;
}

namespace {

/// `admin:`: its address alone, or with what guards it.
void write_admin(object_writer& w, const config& cfg) {
  if (cfg.admin_token_file.empty() && cfg.admin_allowed_hosts.empty()) {
    w.string("admin", endpoint_text(cfg.admin));
  } else {
    object_writer a(w.nested("admin"));
    a.string("listen", endpoint_text(cfg.admin));
    if (!cfg.admin_token_file.empty()) a.string("token_file", cfg.admin_token_file);  // its path, never its content
    if (!cfg.admin_allowed_hosts.empty()) a.strings("allowed_hosts", cfg.admin_allowed_hosts);
  }
}

void write_limits(object_writer& w, const request_limits& limits) {
  object_writer l(w.nested("limits"));
  l.string("max_request_head", format_size(limits.max_request_head));
  l.string("max_request_body", format_size(limits.max_request_body));
  l.string("idle_timeout", format_duration(limits.idle_timeout));
  l.integer("max_connections", limits.max_connections);
  l.integer("max_unknown_hosts", limits.max_unknown_hosts);
  l.string("head_timeout", format_duration(limits.head_timeout));
  l.string("body_timeout", format_duration(limits.body_timeout));
  l.string("min_body_rate", format_size(limits.min_body_rate));
  l.string("retry_buffer", format_size(limits.retry_buffer));
  l.string("http2_connection_buffer", format_size(limits.http2_connection_buffer));
  l.string("http2_answer_buffer", format_size(limits.http2_answer_buffer));
}

void write_dns(object_writer& w, const dns_settings& dns) {
  object_writer d(w.nested("dns"));
  d.strings("servers", dns.servers);
  d.string("min_ttl", format_duration(dns.min_ttl));
  d.string("max_ttl", format_duration(dns.max_ttl));
  d.string("stale_for", format_duration(dns.stale_for));
  d.string("timeout", format_duration(dns.timeout));
  d.string("connect_stagger", format_duration(dns.connect_stagger));
}

/// `store:`, written only when set: an unset store is not opened at all.
void write_store(object_writer& w, const config::store_settings& store) {
  object_writer st(w.nested("store"));
  if (store.type == config::store_settings::kind::postgres) {
    st.string("type", "postgres");
    st.string("dsn", store.dsn);  // holds no password: the loader refuses one
    if (!store.password_file.empty()) st.string("password_file", store.password_file);
    st.integer("pool", store.pool);
    using pooler = config::store_settings::pooler_mode;
    st.string("pooler", store.pooler == pooler::none          ? "none"
                        : store.pooler == pooler::transaction ? "transaction"
                                                              : "auto");
    st.string("lease", format_duration(store.lease));
  } else {
    st.string("type", "sqlite");
    st.string("path", store.path);
  }
  st.string("retention", format_duration(store.retention));
  st.string("max_size", format_size(store.max_size));
}

void write_inbound(object_writer& w, const inbound_settings& in) {
  object_writer o(w.nested("inbound"));
  o.string("listen", endpoint_text(in.listen));
  o.string("app", endpoint_text(in.app));
  o.string("attempt_timeout", format_duration(in.forward.attempt_timeout));
  o.string("claim_lease", format_duration(in.claim_lease));
  o.string("principal_header", in.principal_header);
  o.string("max_body", format_size(in.max_body));
  auto& routes = o.nested("routes").open_array();
  for (auto const& r : in.routes) {
    object_writer ro(routes);
    {
      object_writer m(ro.nested("match"));
      if (!r.match.path_prefix.empty()) m.string("path_prefix", r.match.path_prefix);
      if (!r.match.methods.empty()) m.strings("methods", r.match.methods);
    }
    if (r.idempotency.enabled) {
      object_writer id(ro.nested("idempotency"));
      id.boolean("require", r.idempotency.require);
      id.string("ttl", format_duration(r.idempotency.ttl));
      id.string("scope", r.idempotency.scope_principal ? "principal" : "route");
      id.integer("mismatch_status", r.idempotency.mismatch_status);
    }
    if (!r.dedupe.header.empty()) {
      object_writer d(ro.nested("dedupe"));
      d.string("header", r.dedupe.header);
      d.string("ttl", format_duration(r.dedupe.ttl));
    }
  }
  routes.close_array();
}

void write_tracing(object_writer& w, const config& cfg) {
  object_writer t(w.nested("tracing"));
  t.string("endpoint", format_service_url(*cfg.tracing.endpoint));
  t.number("sample_ratio", cfg.tracing.sample_ratio);
  t.integer("max_queue", cfg.tracing.max_queue);
  t.string("timeout", format_duration(cfg.tracing.timeout));
  // The YAML's keys only, so that this loads back; what came from OpenTelemetry's
  // variables alone (headers, whose values are credentials, the resource, the sampler's
  // kind) stays in the environment it came from.
  if (!cfg.tracing.ca_file.empty()) t.string("ca_file", cfg.tracing.ca_file);
}

void write_dependencies(object_writer& w, const std::vector<dependency>& dependencies) {
  object_writer deps(w.nested("dependencies"));
  for (auto const& d : dependencies) {
    object_writer one(deps.nested(d.name));
    one.strings("hosts", d.hosts);
    if (d.origin) one.string("origin", format_origin(*d.origin));
    if (d.tls) write_tls(one, *d.tls);
    if (d.auth) write_auth(one, *d.auth);
    write_policy(one, d.effective);
    if (!d.routes.empty()) {
      auto& list = one.nested("routes").open_array();
      for (auto const& r : d.routes) {
        object_writer route(list);
        {
          object_writer match(route.nested("match"));
          if (!r.path_prefix.empty()) match.string("path_prefix", r.path_prefix);
          if (!r.methods.empty()) match.strings("methods", r.methods);
        }
        write_policy(route, r.effective, false);
      }
      list.close_array();
    }
  }
}

}  // namespace

std::string effective_config_json(const config& cfg) {
  std::string out;
  observe::json_writer json(out);
  {
    object_writer w(json);
    w.string("listen", endpoint_text(cfg.listen));
    write_admin(w, cfg);
    w.string("service", cfg.service);
    w.string("log_level", cfg.log_level);
    w.integer("workers", cfg.workers);
    w.string("drain_timeout", format_duration(cfg.drain_timeout));
    w.boolean("watch_config", cfg.watch_config);
    w.string("unknown_hosts", cfg.unknown_hosts == unknown_hosts_policy::allow ? "allow" : "deny");
    write_limits(w, cfg.limits);
    write_dns(w, cfg.dns);
    if (cfg.store.configured) write_store(w, cfg.store);
    if (cfg.inbound.configured) write_inbound(w, cfg.inbound);
    if (!cfg.alert_webhook.empty()) {
      object_writer al(w.nested("alert"));
      al.string("webhook", cfg.alert_webhook);
    }
    if (cfg.tracing.endpoint) write_tracing(w, cfg);
    {
      object_writer a(w.nested("async"));
      a.string("max_body", format_size(cfg.async.max_body));
    }
    {
      object_writer d(w.nested("defaults"));
      write_policy(d, cfg.defaults);
    }
    write_dependencies(w, cfg.dependencies);
  }
  out += '\n';
  return out;
}

}  // namespace rebound::config
