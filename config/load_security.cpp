/** The `tls` and `auth` keys of a dependency (SPEC 5, R-9). Both name files, never hold a
    secret: a secret in the YAML would show in /config, in `rebound check` output and in
    every copy of the file. */
#include "config/yaml_reader.hpp"

#include <libpq-fe.h>
#include <unistd.h>

namespace rebound::config {

std::optional<std::string> yaml_reader::readable_file(const YAML::Node& parent, std::string_view key,
                                                      const std::string& path) {
  auto const n = parent[std::string(key)];
  if (!n) return std::nullopt;
  auto const p = join(path, key);
  auto const s = scalar(n, p);
  if (!s) return std::nullopt;
  if (s->empty()) {
    error(n, p, "expected a file path");
    return std::nullopt;
  }
  // A warning, not an error: `rebound check` runs in CI, where secrets are not mounted.
  // The proxy itself refuses to start (or reload) when the file cannot be used.
  if (::access(s->c_str(), R_OK) != 0)
    warn(n, p, "cannot read \"" + *s + "\" here; rebound refuses to start without it", "");
  return *s;
}

dsn_problem postgres_dsn_problem(const std::string& dsn) {
  char* err = nullptr;
  PQconninfoOption* opts = PQconninfoParse(dsn.c_str(), &err);
  if (!opts) {
    std::string why = err ? err : "out of memory";
    PQfreemem(err);
    while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
    return {"not a PostgreSQL connection string: " + why, ""};
  }
  dsn_problem found;
  for (auto* o = opts; o->keyword; ++o)
    if (o->val && std::string_view(o->keyword) == "password")
      found = {"holds a password; put it in store.password_file, which /config and logs never show", "R-9"};
  PQconninfoFree(opts);
  return found;
}

std::optional<tls_settings> read_tls(yaml_reader& r, const YAML::Node& n, const std::string& path) {
  if (!r.expect_map(n, path)) return std::nullopt;
  r.check_keys(n, path, {"ca_file", "server_name", "client_cert", "client_key", "verify"});
  auto const errors_before = r.diagnostics().size();
  tls_settings t;
  if (auto v = n["verify"]) {
    bool verify = true;
    r.typed(n, "verify", path, verify, parse_bool);
    if (!verify)
      r.error(v, yaml_reader::join(path, "verify"),
              "certificate verification cannot be turned off; trust a private CA with tls.ca_file instead", "R-9");
  }
  if (auto f = r.readable_file(n, "ca_file", path)) t.ca_file = *f;
  if (auto s = n["server_name"]) {
    auto const v = r.scalar(s, yaml_reader::join(path, "server_name"));
    if (v && (v->empty() || v->find_first_of(" /:@") != std::string::npos))
      r.error(s, yaml_reader::join(path, "server_name"), "expected a host name, e.g. payments.example.com");
    else if (v)
      t.server_name = *v;
  }
  if (auto f = r.readable_file(n, "client_cert", path)) t.client_cert = *f;
  if (auto f = r.readable_file(n, "client_key", path)) t.client_key = *f;
  if (n["client_cert"].IsDefined() != n["client_key"].IsDefined())
    r.error(n, path, "client_cert and client_key go together (mTLS needs both)");
  if (r.diagnostics().size() != errors_before) return std::nullopt;
  return t;
}

std::optional<auth_settings> read_auth(yaml_reader& r, const YAML::Node& n, const std::string& path) {
  if (!r.expect_map(n, path)) return std::nullopt;
  auto const errors_before = r.diagnostics().size();
  if (auto secret = n["client_secret"])
    r.error(secret, yaml_reader::join(path, "client_secret"),
            "a secret does not go in the config file: put it in a file and name it with client_secret_file", "R-9");
  if (auto token = n["token"])
    r.error(token, yaml_reader::join(path, "token"),
            "a token does not go in the config file: use type: bearer_file with path", "R-9");
  auth_settings a;
  auto const type_node = n["type"];
  auto const type = type_node ? r.scalar(type_node, yaml_reader::join(path, "type")) : std::nullopt;
  if (!type_node) {
    r.error(n, yaml_reader::join(path, "type"), "missing: expected oauth2_client_credentials or bearer_file");
    return std::nullopt;
  }
  if (!type) return std::nullopt;
  if (*type == "oauth2_client_credentials") {
    a.type = auth_settings::kind::oauth2_client_credentials;
    r.check_keys(n, path,
                 {"type", "token_url", "client_id", "client_secret_file", "scope", "ca_file", "refresh_skew",
                  "client_secret", "token"});
    for (auto const* key : {"token_url", "client_id", "client_secret_file"})
      if (!n[key]) r.error(n, yaml_reader::join(path, key), "missing: oauth2_client_credentials needs it");
    r.typed(n, "token_url", path, a.token_url, parse_service_url);
    if (auto id = n["client_id"]) {
      if (auto v = r.scalar(id, yaml_reader::join(path, "client_id"))) a.client_id = *v;
    }
    if (auto f = r.readable_file(n, "client_secret_file", path)) a.client_secret_file = *f;
    if (auto s = n["scope"]) {
      if (auto v = r.scalar(s, yaml_reader::join(path, "scope"))) a.scope = *v;
    }
    if (auto f = r.readable_file(n, "ca_file", path)) a.token_ca_file = *f;
  } else if (*type == "bearer_file") {
    a.type = auth_settings::kind::bearer_file;
    r.check_keys(n, path, {"type", "path", "refresh_skew", "client_secret", "token"});
    if (!n["path"]) r.error(n, yaml_reader::join(path, "path"), "missing: bearer_file needs the token file's path");
    if (auto f = r.readable_file(n, "path", path)) a.path = *f;
  } else {
    r.error(type_node, yaml_reader::join(path, "type"),
            "unknown auth type \"" + *type + "\" (expected oauth2_client_credentials or bearer_file)");
    return std::nullopt;
  }
  r.typed(n, "refresh_skew", path, a.refresh_skew, parse_duration);
  if (r.diagnostics().size() != errors_before) return std::nullopt;
  return a;
}

}  // namespace rebound::config
