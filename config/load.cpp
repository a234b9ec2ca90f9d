#include "config/load.hpp"

#include "config/otel_env.hpp"

#include "config/check.hpp"
#include "config/typed_values.hpp"
#include "config/schema_reader.hpp"
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

}  // namespace

void reader::read_top(const YAML::Node& root, config& c) {
  if (!root || root.IsNull()) return;  // an empty file means the built-in defaults
  if (!expect_map(root, "")) return;
  check_keys(root, "",
             {"service", "log_level", "listen", "admin", "workers", "drain_timeout", "watch_config", "unknown_hosts",
              "limits", "dns", "defaults", "dependencies", "store", "async", "alert", "inbound", "tracing"});
  typed(root, "service", "", c.service, parse_service);
  typed(root, "log_level", "", c.log_level, parse_log_level);
  typed(root, "listen", "", c.listen, parse_endpoint);
  read_admin(root, c);
  typed(root, "workers", "", c.workers, parse_workers);
  typed(root, "drain_timeout", "", c.drain_timeout, parse_duration);
  typed(root, "watch_config", "", c.watch_config, parse_bool);
  typed(root, "unknown_hosts", "", c.unknown_hosts, parse_unknown_hosts);
  if (auto n = root["limits"]) read_limits(n, "limits", c.limits);
  if (auto n = root["dns"]) read_dns(n, c.dns);
  if (auto n = root["store"]; n && expect_map(n, "store")) read_store_section(n, c.store);
  if (auto n = root["async"]; n && expect_map(n, "async")) read_async(n, c.async);
  if (auto n = root["alert"]; n && expect_map(n, "alert")) read_alert(n, c);
  if (auto n = root["tracing"]; n && expect_map(n, "tracing")) read_tracing(n, c.tracing);
  if (auto n = root["inbound"]) read_inbound(n, "inbound", c.inbound);
  // Constructed in one go: assigning to a bound YAML::Node rewrites the node it refers to.
  auto const defaults_node = root["defaults"];
  bool const has_defaults = defaults_node && expect_map(defaults_node, "defaults");
  if (has_defaults) check_keys_list(defaults_node, "defaults", policy_keys());
  policy_layer const defaults = has_defaults ? read_policy_layer(defaults_node, "defaults") : empty_layer(root);
  c.defaults = resolve({&defaults});
  check_concurrency_share(defaults, c.workers);
  if (auto n = root["dependencies"]) read_dependencies(n, "dependencies", c, defaults);
  if (c.store.type == config::store_settings::kind::postgres) check_lease_outlasts_attempts(root["store"], c);
  // Writes on the admin API exist only where calls are handed over (cancel, replay).
  if (root["admin"] && c.hands_over() && c.admin_token_file.empty() && c.admin.host != "127.0.0.1" &&
      c.admin.host != "::1" && c.admin.host != "localhost")
    warn(root["admin"], "admin",
         "the admin API listens beyond loopback without admin.token_file: anyone who reaches it can submit "
         "calls that rebound sends with a dependency's credentials, and cancel and replay handed-over calls",
         "");
}

/// `admin:`, an address alone or a map of its listen address, token file and allowed hosts.
void reader::read_admin(const YAML::Node& root, config& c) {
  if (auto a = root["admin"]; a && a.IsMap()) {
    check_keys(a, "admin", {"listen", "token_file", "allowed_hosts"});
    typed(a, "listen", "admin", c.admin, parse_endpoint);
    if (auto f = readable_file(a, "token_file", "admin")) c.admin_token_file = *f;
    if (auto h = a["allowed_hosts"]) read_admin_allowed_hosts(h, c);
  } else {
    typed(root, "admin", "", c.admin, parse_endpoint);
  }
}

/// `store:` (a map): its type's keys (read_store), its bound and retention, a SQLite path.
void reader::read_store_section(const YAML::Node& n, config::store_settings& st) {
  check_keys(n, "store", {"type", "path", "dsn", "password_file", "pool", "pooler", "lease", "retention", "max_size"});
  read_store(n, st);
  typed(n, "max_size", "store", st.max_size, parse_size);
  if (n["max_size"] && st.max_size != 0 && st.max_size < (std::uint64_t{1} << 20))
    error(n["max_size"], "store.max_size", "must be 0 (no bound) or at least 1MiB");
  typed(n, "retention", "store", st.retention, parse_duration);
  if (n["retention"] && (st.retention < std::chrono::minutes(1) || st.retention > std::chrono::hours(24 * 365)))
    error(n["retention"], "store.retention", "must be between 1m and 365d");
  st.configured = true;
  typed(n, "path", "store", st.path, [](std::string_view s) {
    return s.empty() ? parsed<std::string>::fail("must be a file path") : parsed<std::string>::ok(std::string(s));
  });
}

void reader::read_async(const YAML::Node& n, config::async_settings& a) {
  check_keys(n, "async", {"max_body"});
  typed(n, "max_body", "async", a.max_body, parse_size);
  if (a.max_body == 0 || a.max_body > (64u << 20))
    error(n["max_body"], "async.max_body", "must be between 1B and 64MiB");
}

void reader::read_alert(const YAML::Node& n, config& c) {
  check_keys(n, "alert", {"webhook"});
  typed(n, "webhook", "alert", c.alert_webhook, [](std::string_view s) {
    auto const rest = s.starts_with("http://") ? s.substr(7) : std::string_view();
    if (rest.empty() || rest.front() == '/' || s.find_first_of(" \t\r\n") != std::string_view::npos)
      return parsed<std::string>::fail(
          "must be an absolute http:// URL (for TLS, name a dependency whose origin is https://)");
    return parsed<std::string>::ok(std::string(s));
  });
}

void reader::read_tracing(const YAML::Node& n, config::tracing_settings& t) {
  check_keys(n, "tracing", {"endpoint", "sample_ratio", "max_queue", "timeout", "ca_file"});
  typed(n, "endpoint", "tracing", t.endpoint, [](std::string_view s) {
    auto u = parse_service_url(s);
    if (!u.value) return parsed<std::optional<service_url>>::fail(u.error);
    return parsed<std::optional<service_url>>::ok(*u.value);
  });
  typed(n, "timeout", "tracing", t.timeout, parse_duration);
  if (n["timeout"] && t.timeout.count() == 0) error(n["timeout"], "tracing.timeout", "must be more than 0");
  typed(n, "ca_file", "tracing", t.ca_file, [](std::string_view s) { return parsed<std::string>::ok(std::string(s)); });
  typed(n, "sample_ratio", "tracing", t.sample_ratio, parse_ratio);
  typed(n, "max_queue", "tracing", t.max_queue, parse_count);
  if (n["max_queue"] && t.max_queue == 0) error(n["max_queue"], "tracing.max_queue", "must be at least 1");
}

/** Another instance takes a task over once its lease ran out: a lease shorter than an
    attempt would let two instances deliver the same task at once. */
void reader::check_lease_outlasts_attempts(const YAML::Node& n, const config& c) {
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

/// `admin.allowed_hosts`: host names (no port, no scheme), lower-cased; `.name` for a domain.
void reader::read_admin_allowed_hosts(const YAML::Node& n, config& c) {
  if (!n.IsSequence()) {
    error(n, "admin.allowed_hosts", "expected a list of host names (admin.example.com, or .example.com for a domain)");
    return;
  }
  for (std::size_t i = 0; i < n.size(); ++i) {
    auto const path = "admin.allowed_hosts[" + std::to_string(i) + "]";
    auto const h = scalar(n[i], path);
    if (!h) continue;
    auto const name = lower(*h);
    bool const valid = !name.empty() && name != "." && std::all_of(name.begin(), name.end(), [](unsigned char ch) {
      return std::isalnum(ch) || ch == '-' || ch == '.' || ch == '_';
    });
    if (!valid) {
      error(n[i], path, "invalid host name \"" + *h + "\" (a name without port or scheme, or .domain)");
      continue;
    }
    c.admin_allowed_hosts.push_back(name);
  }
}

/// The store's type and, for postgres, where the database is (type-specific keys checked).
void reader::read_store(const YAML::Node& n, config::store_settings& st) {
  using kind = config::store_settings::kind;
  typed(n, "type", "store", st.type, [](std::string_view s) {
    if (s == "sqlite") return parsed<kind>::ok(kind::sqlite);
    if (s == "postgres") return parsed<kind>::ok(kind::postgres);
    return parsed<kind>::fail("must be sqlite or postgres");
  });
  bool const pg = st.type == kind::postgres;
  for (auto const* key : {"dsn", "password_file", "pool", "pooler", "lease"})
    if (n[key] && !pg) error(n[key], join("store", key), "applies to type: postgres only");
  if (pg && n["path"]) error(n["path"], "store.path", "applies to type: sqlite only");
  if (!pg) return;
  if (!n["dsn"])
    error(n, "store.dsn", "required for type: postgres (\"host=db.internal dbname=rebound user=rebound\")");
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
  using pooler = config::store_settings::pooler_mode;
  typed(n, "pooler", "store", st.pooler, [](std::string_view s) {
    if (s == "auto") return parsed<pooler>::ok(pooler::automatic);
    if (s == "none") return parsed<pooler>::ok(pooler::none);
    if (s == "transaction") return parsed<pooler>::ok(pooler::transaction);
    return parsed<pooler>::fail("must be auto, none or transaction");
  });
  typed(n, "lease", "store", st.lease, parse_duration);
  if (n["lease"] && (st.lease < std::chrono::seconds(1) || st.lease > std::chrono::hours(24)))
    error(n["lease"], "store.lease", "must be between 1s and 24h");
}

void reader::read_limits(const YAML::Node& n, const std::string& path, request_limits& l) {
  if (!expect_map(n, path)) return;
  check_keys(n, path,
             {"max_request_head", "max_request_body", "idle_timeout", "max_connections", "head_timeout", "body_timeout",
              "min_body_rate", "max_unknown_hosts", "retry_buffer", "http2_connection_buffer", "http2_answer_buffer"});
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
  typed(n, "http2_answer_buffer", path, l.http2_answer_buffer, parse_size);
  if (l.http2_answer_buffer < (64u << 10) || l.http2_answer_buffer > (1u << 30))
    error(n["http2_answer_buffer"], join(path, "http2_answer_buffer"), "must be between 64KiB and 1GiB");
  if (l.min_body_rate == 0)
    error(n["min_body_rate"], join(path, "min_body_rate"), "must be greater than 0 (bytes per second)");
}

namespace {

config load(const YAML::Node& root, reader& r, std::vector<diagnostic>* warnings, const environment* env) {
  config c = default_config();
  r.read_top(root, c);
  if (env) {
    auto const tracing = root.IsMap() ? root["tracing"] : YAML::Node();
    auto const has = [&tracing](const char* key) { return tracing && tracing.IsMap() && tracing[key]; };
    yaml_given const given{root.IsMap() && root["service"], static_cast<bool>(has("endpoint")),
                           static_cast<bool>(has("sample_ratio")), static_cast<bool>(has("timeout")),
                           static_cast<bool>(has("ca_file"))};
    apply_otel_environment(c, given, *env ? *env : environment(process_environment), r.diagnostics(), r.warnings());
  }
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

config load_config_text(std::string_view yaml, const std::string& name, std::vector<diagnostic>* warnings,
                        const environment& env) {
  auto const root = parse_yaml(yaml, name);
  reader r(name);
  return load(root, r, warnings, &env);
}

policy load_policy_text(std::string_view text, const std::string& name) {
  auto spec = parse_yaml(text, name);
  if (!spec.IsMap()) throw config_error({diagnostic{name, 1, 1, "", "a policy is an object of policy keys", ""}});
  if (!spec["context"]) spec["context"] = "async";
  YAML::Node root(YAML::NodeType::Map);
  root["defaults"] = spec;
  reader r(name);
  return load(root, r, nullptr, nullptr).defaults;
}

config load_config_file(const std::string& path, std::vector<diagnostic>* warnings, const environment& env) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw config_error({diagnostic{path, 0, 0, "", "cannot read the file", ""}}, true);
  std::ostringstream text;
  text << in.rdbuf();
  return load_config_text(text.str(), path, warnings, env);
}

config default_config() { return config{}; }

}  // namespace rebound::config
