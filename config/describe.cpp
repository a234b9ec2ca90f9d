#include "config/describe.hpp"

#include "config/object_writer.hpp"
#include "config/policy_keys.hpp"
#include "config/typed_values.hpp"

namespace rebound::config {
namespace {

std::string endpoint_text(const endpoint& e) {
  auto const host = e.host.find(':') != std::string::npos ? "[" + e.host + "]" : e.host;
  return host + ":" + std::to_string(e.port);
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
    describe_policy(w, p, false);
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
    describe_policy(one, d.effective);
    if (!d.routes.empty()) {
      auto& list = one.nested("routes").open_array();
      for (auto const& r : d.routes) {
        object_writer route(list);
        {
          object_writer match(route.nested("match"));
          if (!r.path_prefix.empty()) match.string("path_prefix", r.path_prefix);
          if (!r.methods.empty()) match.strings("methods", r.methods);
        }
        describe_policy(route, r.effective, false);
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
      describe_policy(d, cfg.defaults);
    }
    write_dependencies(w, cfg.dependencies);
  }
  out += '\n';
  return out;
}

}  // namespace rebound::config
